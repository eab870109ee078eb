//! Garbage collection scenarios run on every backend (`tests/gc.rs` on
//! memory, `tests/etcd_client.rs` on etcd): ReplicaSets owning pods.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tend::client::Client;
use tend::gc::{self, GarbageCollector, Owned};
use tend::testing::Harness;
use tend::{Informer, Revision, Source};

/// An owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSet {
    pub name: String,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(ReplicaSet, key: name: String, version: version);

/// A dependent, owned by the set it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    pub name: String,
    pub set: Option<String>,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(Pod, key: name: String, version: version);

impl Owned for Pod {
    type Owner = ReplicaSet;
    fn owner(&self) -> Option<String> {
        self.set.clone()
    }
}

pub fn set(name: &str) -> ReplicaSet {
    ReplicaSet {
        name: name.to_owned(),
        version: Revision::ZERO,
    }
}

pub fn pod(name: &str, set: Option<&str>) -> Pod {
    Pod {
        name: name.to_owned(),
        set: set.map(str::to_owned),
        version: Revision::ZERO,
    }
}

/// A harness running a collector with `grace` over the two sources.
pub fn collector(
    pods: impl Source<Object = Pod>,
    sets: impl Source<Object = ReplicaSet>,
    clients: (Client<Pod>, Client<ReplicaSet>),
    grace: Duration,
) -> Harness {
    let pod_informer = Informer::builder(pods)
        .index(gc::OWNER_INDEX, gc::owner_index::<Pod>)
        .build()
        .unwrap();
    let set_informer = Informer::builder(sets).build().unwrap();
    let controller = GarbageCollector::new(clients.0, clients.1)
        .grace(grace)
        .controller("pod-gc", pod_informer.clone(), set_informer.clone())
        .unwrap();
    let mut harness = Harness::new();
    harness.informer(&pod_informer);
    harness.informer(&set_informer);
    harness.controller(controller);
    harness
}

/// The names of the pods stored now, sorted.
pub async fn pod_names(pods: &Client<Pod>) -> Vec<String> {
    let mut names: Vec<_> = pods
        .list()
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|p| p.name)
        .collect();
    names.sort();
    names
}

/// Waits (polling every 10 ms of tokio's clock) until the stored pods are
/// `expected`, failing after `limit`.
pub async fn until_pods(pods: &Client<Pod>, expected: &[&str], limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let names = pod_names(pods).await;
        if names == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for pods {expected:?}, stored {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deleting a set collects its pods; pods created after their owner
/// vanished are collected; pods with a live owner and unowned pods stay.
pub async fn deleting_a_replicaset_collects_its_pods(
    pods: impl Source<Object = Pod>,
    sets: impl Source<Object = ReplicaSet>,
    clients: (Client<Pod>, Client<ReplicaSet>),
    limit: Duration,
) {
    let (pod_client, set_client) = clients.clone();
    for name in ["a", "b"] {
        set_client.create(set(name)).await.unwrap();
    }
    for (name, owner) in [
        ("a-1", Some("a")),
        ("a-2", Some("a")),
        ("b-1", Some("b")),
        ("loose", None),
    ] {
        pod_client.create(pod(name, owner)).await.unwrap();
    }
    let grace = Duration::from_millis(200);
    let mut harness = collector(pods, sets, clients, grace);
    harness.settle(limit).await.unwrap();
    tokio::time::sleep(grace * 2).await;
    assert_eq!(
        pod_names(&pod_client).await,
        ["a-1", "a-2", "b-1", "loose"],
        "live owners keep their pods"
    );

    set_client.delete(&"a".to_owned()).await.unwrap();
    until_pods(&pod_client, &["b-1", "loose"], limit).await;

    pod_client.create(pod("late", Some("a"))).await.unwrap();
    pod_client.create(pod("c-1", Some("c"))).await.unwrap();
    until_pods(&pod_client, &["b-1", "loose"], limit).await;
    harness.shutdown().await.unwrap();
}
