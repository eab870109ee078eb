//! Missing binaries and startup timeouts.

use super::*;

#[tokio::test]
async fn a_missing_apiserver_binary_says_how_to_get_one() {
    let missing = PathBuf::from("/nonexistent/kube-apiserver");
    let error = ControlPlane::builder()
        .apiserver_binary(&missing)
        .start()
        .await
        .expect_err("no binary, no plane");
    let HarnessError::NotInstalled {
        binary,
        var,
        looked_at,
        hint,
    } = &error
    else {
        panic!("expected NotInstalled, got {error:?}");
    };
    assert_eq!(
        (*binary, *var, looked_at.as_str()),
        (
            "kube-apiserver",
            "TEND_KUBE_APISERVER_BIN",
            "/nonexistent/kube-apiserver"
        )
    );
    for needed in [
        "TEND_KUBE_APISERVER_BIN",
        "setup-envtest use 1.36",
        "kube-apiserver.gz",
    ] {
        assert!(hint.contains(needed), "the hint names {needed}: {hint}");
    }
    let message = error.to_string();
    assert!(
        message.starts_with("no `kube-apiserver` binary found"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_etcd_binary_says_how_to_get_one() {
    let error = ControlPlane::builder()
        .etcd_binary("/nonexistent/etcd")
        .start()
        .await
        .expect_err("no etcd, no plane");
    let HarnessError::NotInstalled {
        binary,
        var,
        looked_at,
        hint,
    } = &error
    else {
        panic!("expected NotInstalled, got {error:?}");
    };
    assert_eq!(
        (*binary, *var, looked_at.as_str()),
        ("etcd", "TEND_ETCD_BIN", "/nonexistent/etcd")
    );
    assert!(hint.contains("etcd-server"), "{hint}");
}

#[tokio::test]
async fn a_zero_startup_timeout_fails_with_the_log() {
    let error = ControlPlane::builder()
        .startup_timeout(Duration::ZERO)
        .start()
        .await
        .expect_err("no time, no plane");
    assert!(
        matches!(
            error,
            HarnessError::Unhealthy {
                process: "etcd",
                ..
            }
        ),
        "{error:?}"
    );
}
