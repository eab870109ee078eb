//! The Kubernetes membership (`KubeMembership`, Leases on the API server
//! alone) against a real API server: the shared suite
//! (`support/membership_suite.rs`, also run in process and on etcd), a
//! dead member's shards taken over once its Lease expired, a member cut
//! off from the API server (a blackholed proxy) or stopped (SIGSTOP)
//! owning nothing from its local deadline on, before anyone else owns
//! its shards, and names the API server would refuse.
//!
//! Real time: lease 3 s, renew deadline 2 s, retry period 250 ms.

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
mod wait;

#[path = "../support/membership_suite.rs"]
mod membership_suite;

mod members;
mod stops;

use std::net::SocketAddr;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tend::election::ElectionConfig;
use tend::kube::KubeMembership;
use tend::testing::Proxy;
use tend::testing::kube::ControlPlane;

use membership_suite::four;
use wait::within;

const LIMIT: Duration = Duration::from_secs(20);

fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(250),
    )
    .unwrap()
}

async fn plane() -> &'static ControlPlane {
    within(
        "the shared control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .unwrap_or_else(|error| panic!("the shared control plane starts: {error}"))
}

/// A client and a fresh namespace on the shared plane.
async fn setup(prefix: &str) -> (kube::Client, String) {
    let plane = plane().await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    (client, namespace)
}

/// Member `id` of the group `workers` (four shards) in `namespace`.
fn member(client: kube::Client, namespace: &str, id: &str) -> KubeMembership {
    KubeMembership::builder(client, namespace, "workers", id, four())
        .config(fast())
        .build()
        .expect("a valid member")
}

/// A client from `kubeconfig`, sent to `server` instead of the API server's
/// own address when given (a proxy's `https://127.0.0.1:{port}`).
async fn client_for(kubeconfig: Kubeconfig, server: Option<&str>) -> kube::Client {
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a config");
    if let Some(server) = server {
        config.cluster_url = server.parse().expect("a server URL");
    }
    kube::Client::try_from(config).expect("a client")
}

/// A proxy in front of the plane's API server, and a client through it.
async fn proxied() -> (Proxy, kube::Client) {
    let url = plane().await.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let proxy = Proxy::start(address).await.unwrap();
    let through = format!("https://{}", proxy.address());
    let client = client_for(plane().await.kubeconfig(), Some(&through)).await;
    (proxy, client)
}
