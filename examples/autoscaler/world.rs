//! The autoscaler example's world: the users' demand and the metrics
//! server that reports it, a monitor of the time the CPU per pod spends
//! outside the target band, and the summary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken};
use tokio::time::Instant;

use crate::support::{Summary, verdict};
use crate::workloads::{Pod, ReplicaSet, SetStats};
use crate::{Autoscaler, TARGET_CPU};

/// The band the summary measures: the target ± 20 %.
const BAND: f64 = 0.2;

/// The metrics server: the total CPU the app's users demand, in percent
/// of one pod (250 = two and a half pods' worth), shared by the ready
/// pods.
#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics(Arc<Mutex<f64>>);

impl Metrics {
    pub(crate) fn demand(&self) -> f64 {
        *self.0.lock().expect("not poisoned")
    }

    fn set(&self, demand: f64) {
        *self.0.lock().expect("not poisoned") = demand;
    }
}

/// The users: demand in percent of one pod at `fraction` of the run: 100,
/// rising to 400, holding, falling to 140, holding; ±4 % noise.
fn demand_at(fraction: f64) -> f64 {
    let ramp = |from: f64, to: f64, start: f64, end: f64| {
        from + (to - from) * ((fraction - start) / (end - start)).clamp(0.0, 1.0)
    };
    let level = if fraction < 0.45 {
        ramp(100.0, 400.0, 0.1, 0.3)
    } else {
        ramp(400.0, 140.0, 0.45, 0.6)
    };
    level * (1.0 + (fastrand::f64() - 0.5) * 0.08)
}

/// Moves the demand along its profile (cycling when run forever).
async fn run_users(
    metrics: Metrics,
    duration: Option<Duration>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let period = duration.unwrap_or(Duration::from_secs(20));
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return Ok(()),
        }
        let run = start.elapsed().as_secs_f64() / period.as_secs_f64();
        let fraction = if duration.is_some() {
            run.min(1.0)
        } else {
            run % 1.0
        };
        metrics.set(demand_at(fraction));
    }
}

#[derive(Debug, Default)]
struct Band {
    /// Above the band: pods still starting, or not asked for yet.
    hot: Duration,
    /// Below it: the stabilisation window keeping pods after a drop.
    cold: Duration,
    most_replicas: usize,
}

/// Measures how long the CPU per ready pod is outside the target band
/// (target ± 20 %), from the stores.
async fn run_monitor(
    pods: MemoryStore<Pod>,
    metrics: Metrics,
    target: f64,
    band: Arc<Mutex<Band>>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return Ok(()),
        }
        let all = pods.snapshot().objects;
        let ready = all.iter().filter(|p| p.ready).count();
        let per_pod = metrics.demand() / ready.max(1) as f64;
        let mut band = band.lock().expect("not poisoned");
        if per_pod > target * (1.0 + BAND) {
            band.hot += tick.period();
        } else if per_pod < target * (1.0 - BAND) {
            band.cold += tick.period();
        }
        band.most_replicas = band.most_replicas.max(all.len());
    }
}

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
pub(crate) struct World {
    pub(crate) autoscalers: MemoryStore<Autoscaler>,
    pub(crate) replicasets: MemoryStore<ReplicaSet>,
    pub(crate) pods: MemoryStore<Pod>,
    pub(crate) metrics: Metrics,
    pub(crate) sets: Arc<Mutex<SetStats>>,
    pub(crate) scalings: Arc<Mutex<u32>>,
    band: Arc<Mutex<Band>>,
}

impl World {
    pub(crate) fn new() -> Self {
        let world = Self {
            autoscalers: MemoryStore::new("autoscalers"),
            replicasets: MemoryStore::new("replicasets"),
            pods: MemoryStore::new("pods"),
            metrics: Metrics::default(),
            sets: Arc::default(),
            scalings: Arc::default(),
            band: Arc::default(),
        };
        world.metrics.set(demand_at(0.0));
        world
    }

    /// The users, moving the demand along its profile over `duration`,
    /// and the monitor.
    pub(crate) fn add_tasks(
        &self,
        manager: &mut Manager,
        duration: Option<Duration>,
    ) -> Result<(), BoxError> {
        let m = self.metrics.clone();
        manager.add_task("users", move |stop| run_users(m, duration, stop))?;
        let (p, m, b) = (
            self.pods.clone(),
            self.metrics.clone(),
            Arc::clone(&self.band),
        );
        manager.add_task("monitor", move |stop| {
            run_monitor(p, m, TARGET_CPU, b, stop)
        })?;
        Ok(())
    }

    pub(crate) fn summary(&self) -> Result<Summary, BoxError> {
        let rs = self
            .replicasets
            .get(&"web".to_owned())
            .ok_or("web exists")?;
        let ready = self
            .pods
            .snapshot()
            .objects
            .iter()
            .filter(|p| p.ready)
            .count();
        let demand = self.metrics.demand();
        let per_pod = demand / ready.max(1) as f64;
        let band = self.band.lock().expect("not poisoned");
        let sets = self.sets.lock().expect("not poisoned");
        let settled = rs.replicas == ready && (per_pod - TARGET_CPU).abs() <= TARGET_CPU * BAND;
        Ok(Summary::default()
            .line(format!(
                "autoscaler: {} scalings, at most {} pods",
                self.scalings.lock().expect("not poisoned"),
                band.most_replicas
            ))
            .line(format!(
                "replicaset: {} pods created, {} deleted",
                sets.created, sets.deleted
            ))
            .line(format!(
                "time outside the target band ({TARGET_CPU:.0} % ± 20 % per pod): {:.2}s ({:.2}s above it while scaling up, {:.2}s below while the window held pods)",
                (band.hot + band.cold).as_secs_f64(),
                band.hot.as_secs_f64(),
                band.cold.as_secs_f64(),
            ))
            .line(format!(
                "final: demand {demand:.0} %, web wants {}, has {ready} ready at {per_pod:.0} % each: {}",
                rs.replicas,
                verdict(settled, "settled")
            )))
    }
}
