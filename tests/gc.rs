//! The garbage collector on the memory backend: cascading deletion
//! (`support/gc.rs`, also run on etcd), the grace period, keeping orphans,
//! and the property that nothing with a live owner is ever deleted.

#[path = "support/gc.rs"]
mod scenario;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tend::client::{Backend, Client, ClientError, FencingToken};
use tend::memory::MemoryStore;
use tend::{Revision, Snapshot};

use scenario::{Pod, ReplicaSet, pod, pod_names, set};

fn stores() -> (MemoryStore<Pod>, MemoryStore<ReplicaSet>) {
    (MemoryStore::new("pods"), MemoryStore::new("sets"))
}

#[tokio::test(start_paused = true)]
async fn deleting_a_replicaset_collects_its_pods_on_memory() {
    let (pods, sets) = stores();
    let clients = (pods.client(), sets.client());
    let limit = Duration::from_secs(10);
    scenario::deleting_a_replicaset_collects_its_pods(pods, sets, clients, limit).await;
}

#[tokio::test(start_paused = true)]
async fn an_orphan_waits_out_the_grace_period() {
    let (pods, sets) = stores();
    let client = pods.client();
    client.create(pod("p", Some("later"))).await.unwrap();
    let grace = Duration::from_secs(60);
    let mut harness = scenario::collector(
        pods.clone(),
        sets.clone(),
        (client.clone(), sets.client()),
        grace,
    );
    harness.settle(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(pod_names(&client).await, ["p"], "not within its grace");
    // Its owner shows up within the grace: adopted, never collected.
    sets.client().create(set("later")).await.unwrap();
    tokio::time::sleep(grace * 2).await;
    assert_eq!(pod_names(&client).await, ["p"]);
    sets.client().delete(&"later".to_owned()).await.unwrap();
    scenario::until_pods(&client, &[], grace * 2).await;
    harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn keep_orphans_deletes_nothing() {
    let (pods, sets) = stores();
    let client = pods.client();
    client.create(pod("p", Some("gone"))).await.unwrap();
    let informer = tend::Informer::builder(pods.clone()).build().unwrap();
    let owners = tend::Informer::builder(sets.clone()).build().unwrap();
    let controller = tend::gc::GarbageCollector::new(client.clone(), sets.client())
        .grace(Duration::ZERO)
        .keep_orphans(true)
        .controller("keep", informer.clone(), owners.clone())
        .unwrap();
    let mut harness = tend::testing::Harness::new();
    harness.informer(&informer);
    harness.informer(&owners);
    harness.controller(controller);
    harness.settle(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(pod_names(&client).await, ["p"]);
    harness.shutdown().await.unwrap();
}

/// The pods' backend, checking at each delete (atomically: the memory
/// client completes at once on one thread) that the pod's owner is absent.
struct Checked {
    pods: Client<Pod>,
    sets: MemoryStore<ReplicaSet>,
    violations: Arc<AtomicU32>,
}

#[tend::async_trait]
impl Backend for Checked {
    type Object = Pod;

    fn name(&self) -> &str {
        self.pods.name()
    }

    async fn get(&self, key: &String) -> Result<Option<Pod>, ClientError> {
        self.pods.get(key).await
    }

    async fn list(&self) -> Result<Snapshot<Pod>, ClientError> {
        self.pods.list().await
    }

    async fn create(&self, object: Pod, _: Option<FencingToken>) -> Result<Pod, ClientError> {
        self.pods.create(object).await
    }

    async fn update(&self, object: Pod, _: Option<FencingToken>) -> Result<Pod, ClientError> {
        self.pods.update(object).await
    }

    async fn delete(
        &self,
        key: &String,
        version: Option<Revision>,
        _: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        let owner = self.pods.get(key).await?.and_then(|p| p.set);
        if owner.is_some_and(|owner| self.sets.get(&owner).is_some()) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        match version {
            Some(version) => self.pods.delete_at(key, version).await,
            None => self.pods.delete(key).await,
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    CreateSet(u8),
    DeleteSet(u8),
    CreatePod(u8, u8),
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8).prop_map(Op::CreateSet),
        (0..4u8).prop_map(Op::DeleteSet),
        (0..12u8, 0..5u8).prop_map(|(p, s)| Op::CreatePod(p, s)),
        (0..300u16).prop_map(Op::Wait),
    ]
}

/// Applies `ops` with a collector running; returns the deletes of a pod
/// whose owner existed, and whether every pod left has a live owner and
/// every orphan is gone.
async fn run(ops: Vec<Op>) -> (u32, Vec<String>) {
    let (pods, sets) = stores();
    let violations = Arc::new(AtomicU32::new(0));
    let checked = Client::new(Checked {
        pods: pods.client(),
        sets: sets.clone(),
        violations: Arc::clone(&violations),
    });
    let grace = Duration::from_millis(100);
    let mut harness =
        scenario::collector(pods.clone(), sets.clone(), (checked, sets.client()), grace);
    let (pod_client, set_client) = (pods.client(), sets.client());
    for op in ops {
        match op {
            Op::CreateSet(s) => drop(set_client.create(set(&format!("s{s}"))).await),
            Op::DeleteSet(s) => drop(set_client.delete(&format!("s{s}")).await),
            Op::CreatePod(p, s) => drop(
                pod_client
                    .create(pod(&format!("p{p}"), Some(&format!("s{s}"))))
                    .await,
            ),
            Op::Wait(ms) => tokio::time::sleep(Duration::from_millis(u64::from(ms))).await,
        }
    }
    tokio::time::sleep(grace * 3).await;
    harness.settle(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(grace * 3).await;
    harness.settle(Duration::from_secs(5)).await.unwrap();
    let wrong = pods
        .snapshot()
        .objects
        .into_iter()
        .filter(|p| p.set.as_ref().is_none_or(|s| sets.get(s).is_none()))
        .map(|p| p.name)
        .collect();
    harness.shutdown().await.unwrap();
    (violations.load(Ordering::SeqCst), wrong)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn nothing_with_a_live_owner_is_ever_deleted_and_every_orphan_goes(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let (violations, orphans_left) = runtime.block_on(run(ops));
        prop_assert_eq!(violations, 0, "a pod with a live owner was deleted");
        prop_assert!(orphans_left.is_empty(), "orphans left: {:?}", orphans_left);
    }
}
