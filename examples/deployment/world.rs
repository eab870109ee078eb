//! The deployment example's world: its stores and counters, chaos that
//! deletes pods, the monitor's task, and the summary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::ClientError;
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken};
use tokio::time::Instant;

use crate::chaos::delete_random;
use crate::monitor::{CHAOS_GRACE, Monitor, run_monitor};
use crate::support::{Clock, Summary, verdict};
use crate::workloads::{Pod, ReplicaSet, SetStats};
use crate::{Deployment, MAX_SURGE, MAX_UNAVAILABLE, REPLICAS};

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
pub(crate) struct World {
    pub(crate) deployments: MemoryStore<Deployment>,
    pub(crate) replicasets: MemoryStore<ReplicaSet>,
    pub(crate) pods: MemoryStore<Pod>,
    pub(crate) sets: Arc<Mutex<SetStats>>,
    monitor: Arc<Mutex<Monitor>>,
}

impl World {
    pub(crate) fn new() -> Self {
        Self {
            deployments: MemoryStore::new("deployments"),
            replicasets: MemoryStore::new("replicasets"),
            pods: MemoryStore::new("pods"),
            sets: Arc::default(),
            monitor: Arc::default(),
        }
    }

    /// Adds the monitor, and chaos until the returned token is cancelled
    /// (or the manager stops).
    pub(crate) fn add_tasks(
        &self,
        manager: &mut Manager,
        clock: Clock,
    ) -> Result<CancellationToken, BoxError> {
        let (d, p, m) = (
            self.deployments.clone(),
            self.pods.clone(),
            Arc::clone(&self.monitor),
        );
        manager.add_task("monitor", move |stop| run_monitor(d, p, m, stop))?;
        let chaos = manager.shutdown_token().child_token();
        let (p, m, c) = (self.pods.clone(), Arc::clone(&self.monitor), chaos.clone());
        manager.add_task("chaos", move |_| run_chaos(p, m, clock, c))?;
        Ok(chaos)
    }

    /// The update at 15 % of the run, the rollback at 55 %; chaos stops at 80 %.
    pub(crate) async fn timeline(
        &self,
        clock: Clock,
        duration: Option<Duration>,
        chaos: &CancellationToken,
    ) -> Result<(), ClientError> {
        for (at, image, why) in [
            (0.15, "1.5.0", "the update"),
            (0.55, "1.4.0", "the rollback"),
        ] {
            clock.at(duration, at).await;
            println!(
                "{} declare: Deployment myapp now wants myapp:{image} ({why})",
                clock.stamp()
            );
            self.deployments
                .client()
                .modify(&"myapp".to_owned(), |d| d.image = format!("myapp:{image}"))
                .await?;
        }
        clock.at(duration, 0.8).await;
        chaos.cancel();
        println!("{} chaos stops", clock.stamp());
        clock.at(duration, 1.0).await;
        Ok(())
    }

    pub(crate) fn summary(&self) -> Summary {
        let monitor = self.monitor.lock().expect("not poisoned");
        let sets = self.sets.lock().expect("not poisoned");
        let mut summary = Summary::default()
            .line(format!("chaos: {} pods deleted", monitor.chaos))
            .line(format!(
                "replicaset controller: {} pods created, {} deleted",
                sets.created, sets.deleted
            ));
        for rollout in monitor.rollouts.iter().filter(|r| !r.from.is_empty()) {
            let took = rollout.took.map_or("not finished".to_owned(), |t| {
                format!("{:.2}s", t.as_secs_f64())
            });
            summary = summary.line(format!(
                "rollout {} → {}: {took}, at most {} pods (bound {}), at least {} ready (bound {}; {} counting the {} ms after chaos's {} deletions in it)",
                rollout.from,
                rollout.to,
                rollout.most_pods,
                REPLICAS + MAX_SURGE,
                if rollout.least_ready == usize::MAX { "-".to_owned() } else { rollout.least_ready.to_string() },
                REPLICAS - MAX_UNAVAILABLE,
                rollout.least_ready_with_chaos,
                CHAOS_GRACE.as_millis(),
                rollout.chaos,
            ));
        }
        let finished = monitor.rollouts.iter().all(|r| r.took.is_some());
        let bounds = if monitor.violations == 0 {
            "held at every check (2 ms)"
        } else {
            "VIOLATED"
        };
        summary.line(self.final_line(bounds, finished))
    }

    /// What runs at the end, against the template the rollback returned to.
    fn final_line(&self, bounds: &str, finished: bool) -> String {
        let mut all_sets: Vec<String> = self
            .replicasets
            .snapshot()
            .objects
            .iter()
            .map(|rs| format!("{} ×{}", rs.name, rs.replicas))
            .collect();
        all_sets.sort();
        let all = self.pods.snapshot().objects;
        let ready = all
            .iter()
            .filter(|p| p.ready && p.image == "myapp:1.4.0")
            .count();
        let converged = all.len() == REPLICAS && ready == REPLICAS;
        format!(
            "final: myapp runs {} pods, {ready} ready of myapp:1.4.0 ({}); bounds {bounds}: {}",
            all.len(),
            all_sets.join(", "),
            verdict(converged && finished, "converged"),
        )
    }
}

/// Chaos: every 0.5–0.9 s deletes a random pod.
async fn run_chaos(
    pods: MemoryStore<Pod>,
    monitor: Arc<Mutex<Monitor>>,
    clock: Clock,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let wait = Duration::from_millis(fastrand::u64(500..900));
        if stop
            .run_until_cancelled(tokio::time::sleep(wait))
            .await
            .is_none()
        {
            return Ok(());
        }
        if pods.snapshot().objects.is_empty() {
            continue;
        }
        // Counted before the delete: the monitor must not see its effect
        // outside chaos's grace.
        let at = Instant::now();
        monitor.lock().expect("not poisoned").chaos_at(at);
        if let Some(pod) = delete_random(&pods).await {
            println!("{} CHAOS deleted pod {}", clock.stamp(), pod.name);
        }
    }
}
