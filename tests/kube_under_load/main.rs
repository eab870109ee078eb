//! A leader-elected controller on a real API server under load, while the
//! API server fails: 10,000 parent ConfigMaps whose wanted dependent (a
//! Secret with a generated name, or none) keeps changing, two replicas
//! (each through a proxy of its own) leading by a Lease, and rounds of: the
//! API server killed and started again; the replicas cut off, etcd
//! compacted past what they saw and the API server restarted (every watch
//! expires: `410 Gone`, relists); the API server blackholed for every
//! replica past the lease; the leader's way to it blackholed past its
//! lease (its requests held, then delivered late). Checks: every parent
//! has what it wants after each round; no parent has two dependents made
//! in one leadership term (read-your-writes), from a watch of them all;
//! the relists counted; time to recover (p50/p99).
//!
//! Needs kube-apiserver and etcd (see `tend::testing::kube`).
//! `TEND_LOAD_ROUNDS` sets the rounds (default 8), `TEND_LOAD_PARENTS` the
//! parents (default 10,000).

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
mod wait;

mod dependents;
mod rounds;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::KubeConfigOptions;
use tend::election::ElectionConfig;
use tend::kube::KubeSource;
use tend::testing::Proxy;
use tend::testing::kube::ControlPlane;
use tend::{Informer, Object};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use dependents::{Duplicates, Replica, replica, wants};
use wait::within;

/// The Lease the replicas lead by.
const LEASE: &str = "load-leader";
const IDS: [&str; 2] = ["replica-a", "replica-b"];

/// Lease 3 s, renew deadline 2 s, retry period 250 ms.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(250),
    )
    .unwrap()
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

/// A parent ConfigMap, wanting a dependent or not.
fn parent(namespace: &str, index: usize, want: bool) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("p-{index:05}")),
            namespace: Some(namespace.to_owned()),
            labels: Some([("role".to_owned(), "parent".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("want".to_owned(), u8::from(want).to_string())].into()),
        ..ConfigMap::default()
    }
}

/// Creates the parents, 32 at a time; every other one wants a dependent.
async fn seed(client: &kube::Client, namespace: &str, parents: usize) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let creates = futures::stream::iter(0..parents).map(|i| {
        let api = api.clone();
        let map = parent(namespace, i, i % 2 == 0);
        async move { api.create(&PostParams::default(), &map).await }
    });
    let results: Vec<_> = creates.buffer_unordered(32).collect().await;
    for result in results {
        result.expect("a parent is created");
    }
}

/// A client of the plane sent to `server` (a proxy's URL).
async fn client_through(plane: &ControlPlane, server: &str) -> kube::Client {
    let options = KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(plane.kubeconfig(), &options)
        .await
        .expect("a config");
    config.cluster_url = server.parse().expect("a server URL");
    kube::Client::try_from(config).expect("a client")
}

/// The API server's loopback address, from its URL.
fn apiserver_address(plane: &ControlPlane) -> SocketAddr {
    let url = plane.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    format!("127.0.0.1:{port}").parse().unwrap()
}

/// Parents whose dependents on the server are not what they want, read
/// with two lists; `None` while the API server does not answer.
async fn unconverged(client: &kube::Client, namespace: &str) -> Option<usize> {
    let parents: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let parents = parents
        .list(&ListParams::default().labels("role=parent"))
        .await
        .ok()?;
    let secrets = secrets
        .list(&ListParams::default().labels("role=dependent"))
        .await
        .ok()?;
    let mut have = std::collections::HashMap::new();
    for secret in &secrets.items {
        if let Some(owner) = tend::kube::controller_of::<ConfigMap>(secret) {
            *have.entry(owner).or_insert(0usize) += 1;
        }
    }
    let bad = parents
        .items
        .iter()
        .filter(|p| have.get(&p.key()).copied().unwrap_or(0) != usize::from(wants(p)))
        .count();
    Some(bad)
}

/// Waits (bounded) until every parent has what it wants; returns how long.
async fn converge(client: &kube::Client, namespace: &str, what: &str) -> Duration {
    let limit = Duration::from_secs(90);
    let started = Instant::now();
    let mut last = None;
    loop {
        last = unconverged(client, namespace).await.or(last);
        if last == Some(0) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {last:?} parents without what they want after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Everything a round works on.
struct World {
    plane: ControlPlane,
    admin: kube::Client,
    namespace: String,
    parents: usize,
    /// Each replica's way to the API server, by `IDS` order.
    proxies: Vec<Proxy>,
    replicas: Vec<Replica>,
}

impl World {
    /// Relists so far, over both replicas' informers.
    fn relists(&self) -> u64 {
        self.replicas
            .iter()
            .map(|r| r.parents.stats().relists + r.dependents.stats().relists)
            .sum()
    }
}

async fn start(parents: usize, created: &Arc<AtomicUsize>) -> World {
    let plane = within(
        "the control plane",
        Duration::from_secs(90),
        ControlPlane::start(),
    )
    .await
    .expect("the control plane starts");
    let admin = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&admin, "load")
        .await
        .expect("a namespace");
    let seeding = Instant::now();
    within(
        "seeding",
        Duration::from_secs(180),
        seed(&admin, &namespace, parents),
    )
    .await;
    eprintln!("{parents} parents created in {:?}", seeding.elapsed());
    let mut proxies = Vec::new();
    let mut replicas = Vec::new();
    for id in IDS {
        let proxy = Proxy::start(apiserver_address(&plane)).await.unwrap();
        let client = client_through(&plane, &format!("https://{}", proxy.address())).await;
        replicas.push(replica(&client, &namespace, id, created));
        proxies.push(proxy);
    }
    World {
        plane,
        admin,
        namespace,
        parents,
        proxies,
        replicas,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_elected_controller_converges_without_duplicates_while_the_api_server_fails() {
    let rounds = env_or("TEND_LOAD_ROUNDS", 8);
    let created = Arc::new(AtomicUsize::new(0));
    let mut world = start(env_or("TEND_LOAD_PARENTS", 10_000), &created).await;
    // The duplicates' watch, on a client of its own that is never cut off.
    let source = KubeSource::<Secret>::namespaced(world.admin.clone(), &world.namespace)
        .labels("role=dependent");
    let watched = Informer::builder(source).build().expect("an informer");
    let duplicates = Duplicates::watch(&watched);
    let stop = CancellationToken::new();
    let watching = tokio::spawn({
        let (watched, stop) = (watched.clone(), stop.clone());
        async move { watched.run(stop).await }
    });
    let first = converge(&world.admin, &world.namespace, "the first sync").await;
    eprintln!("all parents have what they want {first:?} after the start");
    let measured = rounds::run(&mut world, rounds, &duplicates).await;
    let (same_term, across_terms) = duplicates.counts();
    eprintln!(
        "{rounds} rounds over {} parents: {} dependents created; a parent had two created in one \
         leadership term {same_term} times, in two terms {across_terms} times; {measured}",
        world.parents,
        created.load(Ordering::Relaxed),
    );
    stop.cancel();
    for replica in &world.replicas {
        replica.running.abort();
    }
    drop(watching);
    assert_eq!(
        same_term, 0,
        "a parent had two dependents created in one leadership term (read-your-writes)"
    );
    assert_eq!(
        measured.across_terms_outside_cuts(),
        0,
        "dependents of two terms at once outside the rounds that cut the leader off \
         (a held create landing late cannot be it; a create whose answer was lost \
         with the API server, made again by the next leader, can)"
    );
}
