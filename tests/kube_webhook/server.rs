//! The server on its own: what `build` refuses, and a graceful stop that
//! lets the request being served finish.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use tempfile::TempDir;
use tend::SettingError;
use tend::webhook::{
    AdmissionRequest, CertificateFiles, Verdict, Webhook, WebhookError, WebhookServer,
    WebhookSetting,
};

use super::certs::{Ca, Volume};
use super::tls_client::request;
use super::{LIMIT, Served, within};

fn allow() -> Webhook {
    Webhook::validating(|_: AdmissionRequest<ConfigMap>| async { Verdict::allow() })
}

fn any_port() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[tokio::test]
async fn build_refuses_settings_that_cannot_work() {
    let dir = TempDir::new().unwrap();
    let volume = Volume::new(dir.path(), &Ca::new("build-ca").serving());
    let builder = || WebhookServer::builder(any_port(), volume.files()).route("/a", allow());
    let zero = |setting: WebhookSetting| {
        move |built: Result<WebhookServer, WebhookError>| match built {
            Err(WebhookError::InvalidConfig {
                setting: got,
                error,
            }) => {
                assert_eq!((got, error), (setting.clone(), SettingError::Zero));
            }
            other => panic!("expected {setting} to be refused, got {other:?}"),
        }
    };
    zero(WebhookSetting::MaxBodyBytes)(builder().max_body_bytes(0).build());
    zero(WebhookSetting::CertificateCheckInterval)(
        builder().certificate_check_interval(Duration::ZERO).build(),
    );
    let timeout = WebhookSetting::Timeout { path: "/b".into() };
    zero(timeout)(
        builder()
            .route("/b", allow().timeout(Duration::ZERO))
            .build(),
    );
    assert!(matches!(
        builder().route("relative", allow()).build(),
        Err(WebhookError::InvalidPath { path }) if path == "relative"
    ));
    assert!(matches!(
        builder().route("/a", allow()).build(),
        Err(WebhookError::DuplicatePath { path }) if path == "/a"
    ));
    // Huge values work: no bound.
    let server = builder()
        .max_body_bytes(usize::MAX)
        .certificate_check_interval(Duration::MAX)
        .route("/b", allow().timeout(Duration::MAX))
        .build()
        .expect("huge values are no bound");
    assert_ne!(server.local_addr().port(), 0, "the port chosen");
    let stop = tend::CancellationToken::new();
    let running = tokio::spawn(server.run(stop.clone()));
    tokio::task::yield_now().await;
    stop.cancel();
    let ran = tokio::time::timeout(Duration::from_secs(10), running).await;
    ran.expect("stops")
        .expect("no panic with huge values")
        .expect("ran");
}

#[tokio::test]
async fn build_refuses_certificates_it_cannot_serve_and_a_taken_address() {
    let dir = TempDir::new().unwrap();
    let ca = Ca::new("certs-ca");
    let (good, other) = (ca.serving(), ca.serving());
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (cert, key) = (
        write("tls.crt", &good.cert_pem),
        write("tls.key", &good.key_pem),
    );
    let build = |files: CertificateFiles| WebhookServer::builder(any_port(), files).build();

    let missing = build(CertificateFiles::new(dir.path().join("none.crt"), &key));
    assert!(
        matches!(missing, Err(WebhookError::Read { ref path, .. }) if path.ends_with("none.crt")),
        "{missing:?}"
    );
    let garbage = write("garbage.crt", "not a certificate");
    let no_pem = build(CertificateFiles::new(&garbage, &key));
    assert!(
        matches!(
            no_pem,
            Err(WebhookError::Pem {
                what: "certificate",
                ..
            })
        ),
        "{no_pem:?}"
    );
    let no_key = build(CertificateFiles::new(&cert, &garbage));
    assert!(
        matches!(
            no_key,
            Err(WebhookError::Pem {
                what: "private key",
                ..
            })
        ),
        "{no_key:?}"
    );
    let other_key = write("other.key", &other.key_pem);
    let mismatch = build(CertificateFiles::new(&cert, &other_key));
    assert!(
        matches!(mismatch, Err(WebhookError::Key { .. })),
        "{mismatch:?}"
    );

    let taken = std::net::TcpListener::bind(any_port()).unwrap();
    let address = taken.local_addr().unwrap();
    let bound = WebhookServer::builder(address, CertificateFiles::new(&cert, &key)).build();
    assert!(
        matches!(bound, Err(WebhookError::Bind { address: a, .. }) if a == address),
        "{bound:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_request_being_served_finish() {
    let (ca, dir) = (Ca::new("stop-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let slow = Webhook::validating(|_: AdmissionRequest<ConfigMap>| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Verdict::allow()
    });
    let served =
        Served::start(WebhookServer::builder(any_port(), volume.files()).route("/slow", slow));
    let (address, ca_der) = (served.address, ca.der());
    let review = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},"name":"a","operation":"CREATE","userInfo":{},"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}}}"#;
    let head = "POST /slow HTTP/1.1\r\nContent-Type: application/json";
    let call = tokio::spawn(async move { request(address, &ca_der, head, review).await });
    let in_flight = r#"controller_runtime_webhook_requests_in_flight{webhook="/slow"}"#;
    within("the request to be in flight", LIMIT, async {
        while served.sample(in_flight) < 1.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    served.stop().await;
    let (status, body) = within("the answer", LIMIT, call).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""allowed":true"#), "{body}");
}
