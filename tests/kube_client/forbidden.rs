//! A user RBAC grants nothing: every call of the client, reads and writes
//! alike, is `ClientError::Forbidden`, never `Unavailable` (which would be
//! retried for ever).

use super::*;

/// A client of the shared plane acting as a user with no role.
async fn nobody() -> kube::Client {
    let plane = tend::testing::kube::ControlPlane::shared()
        .await
        .expect("the test control plane starts");
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(plane.kubeconfig(), &options)
        .await
        .expect("the plane's kubeconfig");
    config.auth_info.impersonate = Some("tend-test-nobody".to_owned());
    kube::Client::try_from(config).expect("a client")
}

#[tokio::test]
async fn what_rbac_refuses_is_forbidden_for_reads_and_writes() {
    let (_, namespace) = fresh("forbidden").await;
    let maps = KubeSource::<ConfigMap>::namespaced(nobody().await, &namespace).client();
    let key = ObjectKey::new(&namespace, "a");
    let list = within("a list", LIMIT, maps.list()).await;
    let error = list.expect_err("nobody may list");
    assert!(error.is_forbidden() && !error.is_retryable(), "{error:?}");
    let get = within("a get", LIMIT, maps.get(&key)).await;
    assert!(get.expect_err("nobody may get").is_forbidden());
    let create = within(
        "a create",
        LIMIT,
        maps.create(config_map(&namespace, "a", &[])),
    )
    .await;
    assert!(create.expect_err("nobody may create").is_forbidden());
    let delete = within("a delete", LIMIT, maps.delete(&key)).await;
    assert!(delete.expect_err("nobody may delete").is_forbidden());
}
