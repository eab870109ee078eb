//! The ReplicaSet loop with its state in etcd, as one replica under a
//! Manager with leader election: shared by the end-to-end test and
//! `examples/etcd_replicaset.rs`.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::{ElectionBuildError, EtcdElection, EtcdSource, etcd_client};
use tend::manager::Manager;
use tend::{Informer, Revision};
use tokio_util::sync::CancellationToken;

pub const REPLICASETS: &str = "/tend-demo/replicasets/";
pub const PODS: &str = "/tend-demo/pods/";
pub const ELECTION: &str = "tend-demo";

/// Informer backoff: initial, max, reset after.
const BACKOFF: (Duration, Duration, Duration) = (
    Duration::from_millis(100),
    Duration::from_secs(2),
    Duration::from_secs(30),
);

/// The desired state: how many pods.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaSet {
    pub name: String,
    pub replicas: usize,
    #[serde(skip)]
    pub version: Revision,
}

/// The actual state: a pod owned by a replica set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pod {
    pub name: String,
    pub owner: String,
    /// The replica that created it.
    pub created_by: String,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(ReplicaSet, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);

pub fn replicasets(client: etcd_client::Client) -> EtcdSource<ReplicaSet> {
    EtcdSource::builder("replicasets", client, REPLICASETS).build()
}

pub fn pods(client: etcd_client::Client) -> EtcdSource<Pod> {
    EtcdSource::builder("pods", client, PODS).build()
}

/// Pod names created, and deleted, but not yet seen so in the cache.
type Expected = (HashSet<String>, HashSet<String>);

/// Observe → compare → act for one replica set, every write fenced: the
/// reconcile's client carries the leader's token.
struct Replicas {
    identity: String,
    /// Pods created (or deleted) but not yet seen so in the cache.
    expected: Mutex<HashMap<String, Expected>>,
    verbose: bool,
}

impl Reconciler<ReplicaSet> for Replicas {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<ReplicaSet>) -> Result<Action, ClientError> {
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        let cache = ctx.cache::<Pod>().expect("the controller watches pods");
        let owned = cache.by_index("owner", ctx.key()).unwrap_or_default();
        let desired = ctx.object().map_or(0, |rs| rs.replicas);
        let (to_create, to_delete) = self.to_create_and_delete(ctx.key(), &owned, desired);
        let mut did = Vec::new();
        for _ in 0..to_create {
            let pod = Pod {
                name: format!("{}-{}", ctx.key(), suffix()),
                owner: ctx.key().clone(),
                created_by: self.identity.clone(),
                version: Revision::ZERO,
            };
            let pod = pods.create(pod).await?;
            self.expected
                .lock()
                .entry(ctx.key().clone())
                .or_default()
                .0
                .insert(pod.name.clone());
            did.push(format!("create {}", pod.name));
        }
        for pod in to_delete {
            match pods.delete_at(&pod.name, pod.version).await {
                Ok(_) | Err(ClientError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
            self.expected
                .lock()
                .entry(ctx.key().clone())
                .or_default()
                .1
                .insert(pod.name.clone());
            did.push(format!("delete {}", pod.name));
        }
        if self.verbose && !did.is_empty() {
            println!(
                "[{}] reconcile {} (token {}): {} pods, want {}: {}",
                self.identity,
                ctx.key(),
                pods.token().map_or(0, |token| token.get()),
                owned.len(),
                desired,
                did.join(", ")
            );
        }
        Ok(Action::Done)
    }
}

impl Replicas {
    /// How many pods to create and which to delete (the newest first), with
    /// the pods this replica created or deleted that the cache has not
    /// caught up with counted as done.
    fn to_create_and_delete(
        &self,
        key: &str,
        owned: &[Arc<Pod>],
        desired: usize,
    ) -> (usize, Vec<Pod>) {
        let mut expected = self.expected.lock();
        let (created, deleted) = expected.entry(key.to_owned()).or_default();
        let cached: HashSet<&str> = owned.iter().map(|p| p.name.as_str()).collect();
        created.retain(|name| !cached.contains(name.as_str()));
        deleted.retain(|name| cached.contains(name.as_str()));
        let mut live: Vec<_> = owned
            .iter()
            .filter(|p| !deleted.contains(&p.name))
            .collect();
        let actual = live.len() + created.len();
        live.sort_by_key(|p| std::cmp::Reverse(p.version));
        let surplus: Vec<Pod> = live
            .into_iter()
            .take(actual.saturating_sub(desired))
            .map(|p| (**p).clone())
            .collect();
        (desired.saturating_sub(actual), surplus)
    }
}

fn suffix() -> String {
    (0..5)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

/// Settings of one replica.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub identity: String,
    pub endpoint: String,
    pub election: ElectionConfig,
    pub verbose: bool,
}

/// The election handle a replica campaigns with (keep no clone of it
/// outside the replica, or a killed replica keeps renewing its lease).
pub fn election(
    client: etcd_client::Client,
    config: &ReplicaConfig,
) -> Result<EtcdElection, ElectionBuildError> {
    EtcdElection::builder(client, ELECTION)
        .identity(config.identity.clone())
        .config(config.election)
        .build()
}

/// Runs one replica until `shutdown` fires or it loses the leadership.
pub async fn run_replica(
    config: ReplicaConfig,
    shutdown: CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = tend::testing::etcd::connect(&config.endpoint).await?;
    let election = election(client.clone(), &config)?;
    let pod_source = pods(client.clone());
    let writer = pod_source.client_fenced_by(&election);
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election)
        .graceful_shutdown_timeout(Duration::from_secs(5))
        .build()?;
    let sets = manager.informer("replicasets", || {
        Informer::builder(replicasets(client.clone()))
            .backoff(BACKOFF.0, BACKOFF.1, BACKOFF.2)
            .build()
    })?;
    let pods = manager.informer("pods", || {
        Informer::builder(pod_source)
            .backoff(BACKOFF.0, BACKOFF.1, BACKOFF.2)
            .index("owner", |pod: &Pod| vec![pod.owner.clone()])
            .build()
    })?;
    let reconciler = Replicas {
        identity: config.identity.clone(),
        expected: Mutex::default(),
        verbose: config.verbose,
    };
    let controller = manager
        .controller("replicasets", &sets, reconciler)
        .owns(&pods, |pod: &Pod| Some(pod.owner.clone()))
        .client(writer)
        .build()?;
    manager.add_controller(controller)?;
    let token = manager.shutdown_token();
    let run = manager.run();
    tokio::pin!(run);
    let result = tokio::select! {
        result = &mut run => result,
        () = shutdown.cancelled() => {
            token.cancel();
            run.await
        }
    };
    result.map_err(Into::into)
}
