//! The replicaset example's world: nodes that start pending pods, chaos
//! that deletes pods and kills nodes, a monitor of how long the running
//! pods stay below the declared count, and the summary.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::memory::MemoryStore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::chaos::delete_random;
use crate::support::{Clock, Summary, verdict};
use crate::{NODES, Pod, ReplicaSet};

/// What the controller and the world did, for the summary.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) created: usize,
    pub(crate) removed: usize,
    chaos_deleted: usize,
    nodes_killed: usize,
    longest_below: Duration,
}

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
pub(crate) struct World {
    pub(crate) replicasets: MemoryStore<ReplicaSet>,
    pub(crate) pods: MemoryStore<Pod>,
    pub(crate) stats: Arc<Mutex<Stats>>,
    /// The node chaos killed last: it starts no pods until the next round.
    down: Arc<Mutex<HashSet<usize>>>,
}

impl World {
    pub(crate) fn new() -> Self {
        Self {
            replicasets: MemoryStore::new("replicasets"),
            pods: MemoryStore::new("pods"),
            stats: Arc::default(),
            down: Arc::default(),
        }
    }

    /// Runs the nodes and the monitor until `stop`, chaos until `chaos`.
    pub(crate) fn spawn(
        &self,
        tasks: &mut JoinSet<()>,
        clock: Clock,
        stop: &CancellationToken,
        chaos: &CancellationToken,
    ) {
        tasks.spawn(run_nodes(self.clone(), stop.clone()));
        tasks.spawn(run_chaos(self.clone(), clock, chaos.clone()));
        tasks.spawn(run_monitor(self.clone(), stop.clone()));
    }

    pub(crate) fn summary(&self) -> Summary {
        let stats = self.stats.lock().expect("not poisoned");
        let desired = self.desired();
        let all = self.pods.snapshot().objects;
        let running = all.iter().filter(|p| p.running).count();
        let converged = all.len() == desired && running == desired;
        Summary::default()
            .line(format!(
                "chaos: {} pods deleted, {} nodes killed",
                stats.chaos_deleted, stats.nodes_killed
            ))
            .line(format!(
                "controller: {} pods created, {} deleted",
                stats.created, stats.removed
            ))
            .line(format!(
                "longest time below desired: {:.2?}",
                stats.longest_below
            ))
            .line(format!(
                "final: web wants {desired}, has {} pods ({running} running): {}",
                all.len(),
                verdict(converged, "converged"),
            ))
    }

    fn desired(&self) -> usize {
        let web = self.replicasets.get(&"web".to_owned());
        web.map_or(0, |rs| rs.replicas)
    }
}

/// The node simulator: a node starts each pending pod on it after a delay.
async fn run_nodes(world: World, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    while stop.run_until_cancelled(tick.tick()).await.is_some() {
        let down = world.down.lock().expect("not poisoned").clone();
        for pod in world.pods.snapshot().objects {
            if !pod.running && !down.contains(&pod.node) {
                // A conflict means the pod changed meanwhile: next tick.
                let started = Pod {
                    running: true,
                    ..pod
                };
                let _ = world.pods.client().update(started).await;
            }
        }
    }
}

/// Chaos: every 2 s deletes a random pod, and every third time kills a node.
async fn run_chaos(world: World, clock: Clock, stop: CancellationToken) {
    let period = Duration::from_secs(2);
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    for round in 1u32.. {
        if stop.run_until_cancelled(tick.tick()).await.is_none() {
            break;
        }
        world.down.lock().expect("not poisoned").clear();
        if round.is_multiple_of(3) {
            kill_node(&world, clock).await;
        } else if let Some(pod) = delete_random(&world.pods).await {
            world.stats.lock().expect("not poisoned").chaos_deleted += 1;
            println!("{} CHAOS deleted pod {}", clock.stamp(), pod.name);
        }
    }
    // The end of chaos brings every node back.
    world.down.lock().expect("not poisoned").clear();
}

/// A node dies: its pods are lost, and it starts none until the next round.
async fn kill_node(world: &World, clock: Clock) {
    let node = fastrand::usize(..NODES);
    let all = world.pods.snapshot().objects;
    let lost: Vec<_> = all.iter().filter(|p| p.node == node).collect();
    for pod in &lost {
        let _ = world.pods.client().delete(&pod.name).await;
    }
    world.down.lock().expect("not poisoned").insert(node);
    let mut stats = world.stats.lock().expect("not poisoned");
    stats.nodes_killed += 1;
    stats.chaos_deleted += lost.len();
    println!(
        "{} CHAOS node-{node} died: {} pods lost",
        clock.stamp(),
        lost.len()
    );
}

/// Measures how long the running pods stay below the declared replicas.
async fn run_monitor(world: World, stop: CancellationToken) {
    let mut below_since: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while stop.run_until_cancelled(tick.tick()).await.is_some() {
        let all = world.pods.snapshot().objects;
        let running = all.iter().filter(|p| p.running).count();
        match (running < world.desired(), below_since) {
            (true, None) => below_since = Some(Instant::now()),
            (false, Some(since)) => {
                let mut stats = world.stats.lock().expect("not poisoned");
                stats.longest_below = stats.longest_below.max(since.elapsed());
                below_since = None;
            }
            _ => {}
        }
    }
}
