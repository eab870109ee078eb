//! ReplicaSets and pods, shared by the examples that stack a controller on
//! top of them (`autoscaler`, `deployment`): the objects, the replicaset
//! controller, and a kubelet that starts pods.
//!
//! The replicaset controller writes through the reconcile's client, so a
//! set's next reconcile waits until the pod cache shows its writes
//! (read-your-writes). It also names its pods `SET-0`, `SET-1` … (the
//! lowest free indexes), so that a reconcile on a cache that misses a write
//! anyway (read-your-writes gave up waiting) is harmless: creating a pod
//! that exists fails with `AlreadyExists`, deleting one that is gone with
//! `NotFound`, and neither changes anything.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken, Informer, Revision};
use tokio::time::Instant;

use crate::support::Clock;

/// How many pods of an image; owned by `app` (a Deployment, or nobody).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReplicaSet {
    pub(crate) name: String,
    pub(crate) app: String,
    pub(crate) image: String,
    pub(crate) replicas: usize,
    pub(crate) version: Revision,
}

/// One pod of a replica set; ready once its kubelet started it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pod {
    pub(crate) name: String,
    pub(crate) app: String,
    pub(crate) owner: String,
    pub(crate) image: String,
    pub(crate) ready: bool,
    pub(crate) version: Revision,
}

tend::impl_object!(ReplicaSet, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);

/// Registers on `manager` the informers of replica sets and pods (both
/// indexed by `app`, pods also by `owner`), the replicaset controller, and
/// a kubelet that starts each pod `startup` after it appears; returns the
/// two informers, for the controllers stacked on top.
pub(crate) fn add_replicasets(
    manager: &mut Manager,
    replicasets: &MemoryStore<ReplicaSet>,
    pods: &MemoryStore<Pod>,
    clock: Clock,
    stats: Arc<Mutex<SetStats>>,
    startup: Duration,
) -> Result<(Informer<ReplicaSet>, Informer<Pod>), BoxError> {
    let sets = manager.informer("replicasets", || {
        Informer::builder(replicasets.clone())
            .index("app", |rs: &ReplicaSet| vec![rs.app.clone()])
            .build()
    })?;
    let pod_cache = manager.informer("pods", || {
        Informer::builder(pods.clone())
            .index("owner", |p: &Pod| vec![p.owner.clone()])
            .index("app", |p: &Pod| vec![p.app.clone()])
            .build()
    })?;
    let reconciler = ReplicaSets { clock, stats };
    let controller = manager
        .controller("replicaset", &sets, reconciler)
        .owns(&pod_cache, |p: &Pod| Some(p.owner.clone()))
        .client(pods.client())
        .build()?;
    manager.add_controller(controller)?;
    let pods = pods.clone();
    manager.add_task("kubelet", move |stop| run_kubelet(pods, startup, stop))?;
    Ok((sets, pod_cache))
}

/// Counts of the replicaset controller's writes.
#[derive(Debug, Default)]
pub(crate) struct SetStats {
    pub(crate) created: usize,
    pub(crate) deleted: usize,
}

/// Observe a set's pods, compare with its replicas, act by creating or
/// deleting pods.
struct ReplicaSets {
    clock: Clock,
    stats: Arc<Mutex<SetStats>>,
}

impl Reconciler<ReplicaSet> for ReplicaSets {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<ReplicaSet>) -> Result<Action, ClientError> {
        let cache = ctx.cache::<Pod>().expect("the controller owns pods");
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        let owned = cache.by_index("owner", ctx.key()).unwrap_or_default();
        let desired = ctx.object().map_or(0, |rs| rs.replicas);
        let ready = owned.iter().filter(|p| p.ready).count();
        let mut act = Vec::new();
        if let (Some(rs), true) = (ctx.object(), owned.len() < desired) {
            let taken: HashSet<&str> = owned.iter().map(|p| p.name.as_str()).collect();
            let free = (0..)
                .map(|i| format!("{}-{i}", rs.name))
                .filter(|name| !taken.contains(name.as_str()));
            for name in free.take(desired - owned.len()) {
                let pod = Pod {
                    name: name.clone(),
                    app: rs.app.clone(),
                    owner: rs.name.clone(),
                    image: rs.image.clone(),
                    ready: false,
                    version: Revision::ZERO,
                };
                match pods.create(pod).await {
                    Ok(_) => act.push(format!("create {name}")),
                    Err(ClientError::AlreadyExists { .. }) => {} // ours, not yet cached
                    Err(error) => return Err(error),
                }
            }
        }
        // Scale down: pods not ready first, then the highest indexes.
        let mut surplus: Vec<_> = owned.iter().collect();
        surplus.sort_by_key(|p| (p.ready, std::cmp::Reverse(index(&p.name))));
        for pod in surplus.iter().take(owned.len().saturating_sub(desired)) {
            match pods.delete(&pod.name).await {
                Ok(_) => act.push(format!("delete {}", pod.name)),
                Err(ClientError::NotFound { .. }) => {} // already gone
                Err(error) => return Err(error),
            }
        }
        if act.is_empty() {
            return Ok(Action::Done);
        }
        let mut stats = self.stats.lock().expect("not poisoned");
        stats.created += act.iter().filter(|a| a.starts_with("create")).count();
        stats.deleted += act.iter().filter(|a| a.starts_with("delete")).count();
        println!(
            "{} replicaset {} ({}) | observe: {} pods, {ready} ready | compare: want {desired} | act: {}",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
            owned.len(),
            act.join(", "),
        );
        Ok(Action::Done)
    }
}

/// The index in a pod's name (`web-12` → 12).
fn index(name: &str) -> usize {
    name.rsplit('-')
        .next()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
}

/// The kubelet: a pod becomes ready `startup` after it was first seen.
async fn run_kubelet(
    pods: MemoryStore<Pod>,
    startup: Duration,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut seen: HashMap<(String, Revision), Instant> = HashMap::new();
    loop {
        let now = tokio::select! {
            now = tick.tick() => now,
            () = stop.cancelled() => return Ok(()),
        };
        let pending: Vec<Pod> = pods
            .snapshot()
            .objects
            .into_iter()
            .filter(|p| !p.ready)
            .collect();
        seen.retain(|(name, version), _| {
            pending
                .iter()
                .any(|p| &p.name == name && p.version == *version)
        });
        for pod in pending {
            let since = *seen.entry((pod.name.clone(), pod.version)).or_insert(now);
            if now - since >= startup {
                // A conflict means the pod changed meanwhile: next tick.
                let _ = pods.client().update(Pod { ready: true, ..pod }).await;
            }
        }
    }
}
