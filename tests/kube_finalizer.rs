//! `tend::controller::finalizer` on a real API server: the cleanup runs
//! once across a controller restart, and a failing cleanup is retried with
//! the finalizer kept (`support/cleanup.rs`, also run on memory and etcd).

#[path = "support/cleanup.rs"]
mod cleanup;
#[path = "support/kube.rs"]
mod kube_support;
#[path = "support/wait.rs"]
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube_support::{config_map, fresh};
use tend::Informer;
use tend::kube::KubeSource;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizers_cleanup_runs_exactly_once_across_a_controller_restart_on_kubernetes() {
    let (client, ns) = fresh("finalizer-restart").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let informer = || Informer::builder(source.clone()).build().unwrap();
    let map = config_map(&ns, "held", &[]);
    cleanup::cleanup_runs_exactly_once_across_a_restart(source.client(), informer, map, LIMIT)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizers_failing_cleanup_is_retried_until_it_succeeds_on_kubernetes() {
    let (client, ns) = fresh("finalizer-retried").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let informer = || Informer::builder(source.clone()).build().unwrap();
    let map = config_map(&ns, "held", &[]);
    cleanup::a_failing_cleanup_is_retried_until_it_succeeds(source.client(), informer, map, LIMIT)
        .await;
}
