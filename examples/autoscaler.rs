//! A horizontal autoscaler: it reconciles a ReplicaSet's replica count
//! toward a target average CPU per pod while simulated load rises, holds
//! and falls. Scaling up is at once; scaling down waits out a
//! stabilisation window (it follows the highest recommendation of the
//! window), so a dip in load does not make it flap. The replicaset
//! controller then fulfils the count: two controllers stacked in one
//! `Manager`, each level-triggered on the other's output.
//!
//! tend features: a `Manager` with two controllers and shared informers,
//! `Action::RequeueAfter` (polling a metrics source on a period, as
//! Kubernetes' autoscaler does), `watches` (a change to the ReplicaSet
//! wakes its autoscaler), `Client::modify`; the replicaset controller of
//! `examples/support/workloads.rs` names its pods deterministically, so a
//! reconcile racing its own writes is harmless.
//!
//! ```sh
//! cargo run --example autoscaler                  # ~8 s
//! cargo run --example autoscaler -- --duration 60
//! cargo run --example autoscaler -- --forever
//! ```

mod support;
#[path = "support/workloads.rs"]
mod workloads;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, Cache, CancellationToken, Informer, Revision};
use tokio::time::Instant;

use support::{Clock, Summary, verdict};
use workloads::{Pod, ReplicaSet, SetStats};

/// The desired state: keep the pods of `target` near `cpu` percent each.
#[derive(Debug, Clone, PartialEq)]
struct Autoscaler {
    name: String,
    target: String,
    cpu: f64,
    min: usize,
    max: usize,
    version: Revision,
}

tend::impl_object!(Autoscaler, key: name: String, version: version);

/// A ratio of observed to target CPU within 1 ± this changes nothing
/// (Kubernetes' default tolerance).
const TOLERANCE: f64 = 0.1;
/// How often the autoscaler reads the metrics (Kubernetes: 15 s).
const SYNC_PERIOD: Duration = Duration::from_millis(250);
/// Scale down to the highest recommendation of this window (Kubernetes:
/// 5 minutes).
const STABILISATION: Duration = Duration::from_millis(1500);

/// The metrics server: the total CPU the app's users demand, in percent
/// of one pod (250 = two and a half pods' worth), shared by the ready
/// pods.
#[derive(Debug, Clone, Default)]
struct Metrics(Arc<Mutex<f64>>);

impl Metrics {
    fn demand(&self) -> f64 {
        *self.0.lock().expect("not poisoned")
    }

    fn set(&self, demand: f64) {
        *self.0.lock().expect("not poisoned") = demand;
    }
}

/// Observe the load and the ReplicaSet, compare with the target, act on
/// the ReplicaSet's replica count.
struct Scale {
    replicasets: Client<ReplicaSet>,
    /// Read, not watched: the metrics, not pod events, drive the loop.
    pods: Cache<Pod>,
    metrics: Metrics,
    clock: Clock,
    /// Each autoscaler's recent recommendations, for the stabilisation
    /// window (state of the algorithm, not of the world).
    recommendations: Mutex<HashMap<String, VecDeque<(Instant, usize)>>>,
    scalings: Arc<Mutex<u32>>,
}

impl Scale {
    /// The highest recommendation of the window, `now` included.
    fn stabilised(&self, key: &str, now: Instant, recommended: usize) -> usize {
        let mut all = self.recommendations.lock().expect("not poisoned");
        let window = all.entry(key.to_owned()).or_default();
        window.push_back((now, recommended));
        while window
            .front()
            .is_some_and(|(at, _)| now - *at > STABILISATION)
        {
            window.pop_front();
        }
        window.iter().map(|(_, n)| *n).max().unwrap_or(recommended)
    }
}

impl Reconciler<Autoscaler> for Scale {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Autoscaler>) -> Result<Action, ClientError> {
        let Some(hpa) = ctx.object() else {
            self.recommendations
                .lock()
                .expect("not poisoned")
                .remove(ctx.key());
            return Ok(Action::Done);
        };
        let sets = ctx.cache::<ReplicaSet>().expect("watches replica sets");
        let Some(rs) = sets.get(&hpa.target) else {
            return Ok(Action::RequeueAfter(SYNC_PERIOD));
        };
        let ready = self
            .pods
            .by_index("owner", &rs.name)
            .unwrap_or_default()
            .iter()
            .filter(|p| p.ready)
            .count();
        let demand = self.metrics.demand();
        // Pods not ready yet count as idle (as Kubernetes does when scaling
        // up): the average over the replicas asked for, not the ready ones,
        // so pods still starting do not make it scale up again.
        let ratio = demand / rs.replicas.max(1) as f64 / hpa.cpu;
        let recommended = if (ratio - 1.0).abs() <= TOLERANCE {
            rs.replicas
        } else {
            ((rs.replicas.max(1) as f64 * ratio).ceil() as usize).clamp(hpa.min, hpa.max)
        };
        let wanted = self
            .stabilised(ctx.key(), Instant::now(), recommended)
            .min(recommended.max(rs.replicas));
        if wanted != rs.replicas {
            self.replicasets
                .modify(&rs.name, |rs| rs.replicas = wanted)
                .await?;
            *self.scalings.lock().expect("not poisoned") += 1;
            let held = if wanted > recommended {
                format!(" (recommends {recommended}; the window holds {wanted})")
            } else {
                String::new()
            };
            println!(
                "{} autoscaler {} ({}) | observe: demand {demand:.0} %, {} replicas, {ready} ready, {:.0} % per ready pod | compare: target {:.0} % per pod{held} | act: scale {} {} → {wanted}",
                self.clock.stamp(),
                ctx.key(),
                ctx.triggers(),
                rs.replicas,
                demand / ready.max(1) as f64,
                hpa.cpu,
                rs.name,
                rs.replicas,
            );
        }
        Ok(Action::RequeueAfter(SYNC_PERIOD))
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

const TARGET_CPU: f64 = 50.0;
/// The band the summary measures: the target ± 20 %.
const BAND: f64 = 0.2;

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
struct World {
    autoscalers: MemoryStore<Autoscaler>,
    replicasets: MemoryStore<ReplicaSet>,
    pods: MemoryStore<Pod>,
    metrics: Metrics,
    sets: Arc<Mutex<SetStats>>,
    scalings: Arc<Mutex<u32>>,
    band: Arc<Mutex<Band>>,
}

impl World {
    fn new() -> Self {
        Self {
            autoscalers: MemoryStore::new("autoscalers"),
            replicasets: MemoryStore::new("replicasets"),
            pods: MemoryStore::new("pods"),
            metrics: Metrics::default(),
            sets: Arc::default(),
            scalings: Arc::default(),
            band: Arc::default(),
        }
    }

    /// Both controllers, their informers and the simulation's tasks.
    fn manager(&self, clock: Clock, duration: Option<Duration>) -> Result<Manager, BoxError> {
        let mut manager = Manager::builder().build()?;
        let startup = Duration::from_millis(300);
        let stats = Arc::clone(&self.sets);
        let (rs_cache, pod_cache) = workloads::add_replicasets(
            &mut manager,
            &self.replicasets,
            &self.pods,
            clock,
            stats,
            startup,
        )?;
        let hpa_cache = manager.informer("autoscalers", || {
            Informer::builder(self.autoscalers.clone()).build()
        })?;
        let scale = Scale {
            replicasets: self.replicasets.client(),
            pods: pod_cache.cache(),
            metrics: self.metrics.clone(),
            clock,
            recommendations: Mutex::default(),
            scalings: Arc::clone(&self.scalings),
        };
        let targets = hpa_cache.cache();
        let controller = manager
            .controller("autoscaler", &hpa_cache, scale)
            .watches(&rs_cache, move |rs: &ReplicaSet| {
                let hpas = targets.list().into_iter();
                hpas.filter(|h| h.target == rs.name)
                    .map(|h| h.name.clone())
                    .collect()
            })
            .build()?;
        manager.add_controller(controller)?;
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
        Ok(manager)
    }

    fn summary(&self) -> Result<Summary, BoxError> {
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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("autoscaler", 8.0);
    let clock = Clock::start();
    let world = World::new();
    world.metrics.set(demand_at(0.0));
    let manager = world.manager(clock, duration)?;
    let stop = manager.shutdown_token();

    println!(
        "declare: ReplicaSet web wants 2 pods; autoscaler web keeps them at {TARGET_CPU:.0} % CPU each (1 to 10 pods); demand: 100 % of a pod, rising to 400 %, then falling to 140 %"
    );
    let web = ReplicaSet {
        name: "web".into(),
        app: "web".into(),
        image: "web:1.0".into(),
        replicas: 2,
        version: Revision::ZERO,
    };
    world.replicasets.client().create(web).await?;
    let hpa = Autoscaler {
        name: "web".into(),
        target: "web".into(),
        cpu: TARGET_CPU,
        min: 1,
        max: 10,
        version: Revision::ZERO,
    };
    world.autoscalers.client().create(hpa).await?;
    let running = tokio::spawn(manager.run());
    support::play(&stop, async {
        clock.at(duration, 1.0).await;
        Ok::<_, BoxError>(())
    })
    .await?;
    running.await??;
    println!("{}", world.summary()?);
    Ok(())
}
