//! The deployment example's monitor: it reads the pods themselves (not
//! any cache) every 2 ms and records, per rollout, how long it took and
//! the bounds it saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken};
use tokio::time::Instant;

use crate::Deployment;
use crate::workloads::Pod;

/// How long after a chaos deletion the availability bound is not checked:
/// `max_unavailable` bounds what the rollout takes down, not what fails
/// (as in Kubernetes); a replacement is ready about then (the kubelet
/// starts a pod in 300 ms).
pub(crate) const CHAOS_GRACE: Duration = Duration::from_millis(400);

/// What the monitor saw of one rollout.
#[derive(Debug)]
pub(crate) struct Rollout {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) started: Instant,
    pub(crate) took: Option<Duration>,
    pub(crate) most_pods: usize,
    /// The fewest ready pods outside chaos's grace, and at all.
    pub(crate) least_ready: usize,
    pub(crate) least_ready_with_chaos: usize,
    pub(crate) chaos: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Monitor {
    pub(crate) rollouts: Vec<Rollout>,
    pub(crate) chaos: u32,
    pub(crate) last_chaos: Option<Instant>,
    /// Pods above the surge bound, or ready pods below the availability
    /// bound outside chaos's grace, seen at any instant of a rollout.
    pub(crate) violations: u32,
}

impl Monitor {
    pub(crate) fn chaos_at(&mut self, at: Instant) {
        self.chaos += 1;
        self.last_chaos = Some(at);
        if let Some(rollout) = self.rollouts.last_mut().filter(|r| r.took.is_none()) {
            rollout.chaos += 1;
        }
    }

    /// One look at the world: the deployment and all its pods.
    fn observe(&mut self, deployment: &Deployment, pods: &[Pod], now: Instant) {
        let target = deployment
            .image
            .rsplit(':')
            .next()
            .unwrap_or("?")
            .to_owned();
        let ready = pods.iter().filter(|p| p.ready).count();
        let done = pods.len() == deployment.replicas
            && ready == deployment.replicas
            && pods.iter().all(|p| p.image == deployment.image);
        match self.rollouts.last() {
            // The first image is where the deployment starts: no rollout.
            None => self
                .rollouts
                .push(Rollout::new(String::new(), target, now, true)),
            Some(last) if last.to != target => {
                let from = last.to.clone();
                self.rollouts.push(Rollout::new(from, target, now, false));
            }
            Some(_) => {}
        }
        let graced = self.last_chaos.is_some_and(|at| now - at < CHAOS_GRACE);
        let Some(rollout) = self.rollouts.last_mut().filter(|r| r.took.is_none()) else {
            return;
        };
        rollout.most_pods = rollout.most_pods.max(pods.len());
        rollout.least_ready_with_chaos = rollout.least_ready_with_chaos.min(ready);
        if !graced {
            rollout.least_ready = rollout.least_ready.min(ready);
        }
        let over = pods.len() > deployment.replicas + deployment.max_surge;
        let under = !graced && ready + deployment.max_unavailable < deployment.replicas;
        if over || under {
            self.violations += 1;
        }
        if done {
            rollout.took = Some(now - rollout.started);
        }
    }
}

impl Rollout {
    fn new(from: String, to: String, started: Instant, finished: bool) -> Self {
        Self {
            from,
            to,
            started,
            took: finished.then_some(Duration::ZERO),
            most_pods: 0,
            least_ready: usize::MAX,
            least_ready_with_chaos: usize::MAX,
            chaos: 0,
        }
    }
}

pub(crate) async fn run_monitor(
    deployments: MemoryStore<Deployment>,
    pods: MemoryStore<Pod>,
    monitor: Arc<Mutex<Monitor>>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    loop {
        let now = tokio::select! {
            now = tick.tick() => now,
            () = stop.cancelled() => return Ok(()),
        };
        let Some(deployment) = deployments.get(&"myapp".to_owned()) else {
            continue;
        };
        let all: Vec<Pod> = pods.snapshot().objects;
        monitor
            .lock()
            .expect("not poisoned")
            .observe(&deployment, &all, now);
    }
}
