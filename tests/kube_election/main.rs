//! Leader election on a Kubernetes Lease against a real API server: one
//! leader among candidates, client-go's record, failover after a resign,
//! a crash (task or SIGKILLed process) and a deleted Lease, the local
//! deadline of a leader whose API access stalls or whose process is
//! stopped (SIGSTOP), and fenced writes.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`). Real time: lease 3 s, renew deadline 2 s,
//! retry period 250 ms.

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
mod wait;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tend::ObjectKey;
use tend::client::{Client, ClientError, Fences, FencingToken};
use tend::election::{ElectionConfig, LeaderElector};
use tend::kube::{ElectionBuildError, KubeElection, KubeSource};
use tend::testing::Proxy;
use tend::testing::kube::ControlPlane;
use tokio::task::JoinSet;
use tokio::time::Instant;

use wait::within;

mod election;
mod manager;
mod processes;
mod stalls;

const LIMIT: Duration = Duration::from_secs(20);

/// The Lease every test's election uses (each test has its namespace).
const LEASE: &str = "leader";

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

fn candidate(client: kube::Client, namespace: &str, identity: &str) -> KubeElection {
    KubeElection::builder(client, namespace, LEASE)
        .identity(identity)
        .config(fast())
        .build()
        .expect("a valid candidate")
}

async fn lease(client: &kube::Client, namespace: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    within("reading the Lease", LIMIT, api.get(LEASE))
        .await
        .expect("the Lease exists")
}

/// Campaigns every candidate in a task of its own; each returns its index
/// and token once elected.
fn campaign_all(candidates: &[KubeElection]) -> JoinSet<(usize, FencingToken)> {
    let mut tasks = JoinSet::new();
    for (index, candidate) in candidates.iter().enumerate() {
        let candidate = candidate.clone();
        tasks.spawn(async move { (index, candidate.campaign().await.expect("a campaign")) });
    }
    tasks
}

/// The next candidate to win, within `limit`.
async fn next_winner(
    tasks: &mut JoinSet<(usize, FencingToken)>,
    what: &str,
    limit: Duration,
) -> (usize, FencingToken) {
    within(what, limit, tasks.join_next())
        .await
        .expect("a campaign is running")
        .expect("the campaign task did not panic")
}

/// A config map the fenced writes change.
async fn config_map(client: &kube::Client, namespace: &str) -> ObjectKey {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut map = ConfigMap::default();
    map.metadata.name = Some("acted".to_owned());
    within(
        "creating a config map",
        LIMIT,
        api.create(&PostParams::default(), &map),
    )
    .await
    .expect("the config map is created");
    ObjectKey::new(namespace, "acted")
}

/// Writes `value` into the config map through `client` (a read, then a
/// write); returns the map as written.
async fn act(
    client: &Client<ConfigMap>,
    key: &ObjectKey,
    value: &str,
) -> Result<ConfigMap, ClientError> {
    let value = value.to_owned();
    let change = move |map: &mut ConfigMap| {
        map.data = Some([("by".to_owned(), value.clone())].into());
    };
    within("a fenced write", LIMIT, client.modify(key, change))
        .await
        .map(|written| written.object)
}

/// Writes `map` back through `client`, without reading first (a read would
/// hang behind a blackholed proxy).
async fn write_back(client: &Client<ConfigMap>, map: &ConfigMap) -> Result<(), ClientError> {
    within("a fenced update", LIMIT, client.update(map.clone()))
        .await
        .map(drop)
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

/// A proxy in front of the plane's API server, and its URL.
async fn proxy() -> (Proxy, String) {
    let proxy = Proxy::start(apiserver_address().await).await.unwrap();
    let url = format!("https://{}", proxy.address());
    (proxy, url)
}

/// The API server's loopback address, from its URL `https://127.0.0.1:{port}`.
async fn apiserver_address() -> SocketAddr {
    let url = plane().await.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    format!("127.0.0.1:{port}").parse().unwrap()
}

// ---- Replicas as processes: SIGKILL and SIGSTOP ----

/// The replica process: campaigns, prints `LEADER <pid> <token>`, updates
/// its own config map through a fenced client every 100 ms (no read
/// first: it works from what it last wrote), and once a write is refused
/// prints `FENCED <pid>`, then `LOST <pid>` when `lost()` resolves. Runs
/// only when spawned, with the kubeconfig, namespace and (optionally) a
/// server URL in its environment.
#[test]
#[ignore = "run as a child process by the process tests"]
fn replica_process() {
    let (Ok(kubeconfig), Ok(namespace)) = (
        std::env::var("TEND_TEST_KUBECONFIG"),
        std::env::var("TEND_TEST_NAMESPACE"),
    ) else {
        return;
    };
    let server = std::env::var("TEND_TEST_SERVER").ok();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let file = Kubeconfig::read_from(kubeconfig).unwrap();
        let client = client_for(file, server.as_deref()).await;
        let pid = std::process::id();
        let election = candidate(client.clone(), &namespace, &format!("pid-{pid}"));
        let writes =
            KubeSource::<ConfigMap>::namespaced(client, &namespace).client_fenced_by(&election);
        let mut map = ConfigMap::default();
        map.metadata.name = Some(format!("acted-{pid}"));
        map.metadata.namespace = Some(namespace.clone());
        let mut map = writes.create(map).await.unwrap();
        let token = election.campaign().await.unwrap();
        println!("LEADER {pid} {token}");
        let writes = writes.fenced(token);
        loop {
            map.data = Some([("token".to_owned(), token.to_string())].into());
            match writes.update(map.clone()).await {
                Ok(written) => map = written,
                Err(ClientError::Fenced { .. }) => break,
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("FENCED {pid}");
        election.lost().await;
        println!("LOST {pid}");
    });
}
