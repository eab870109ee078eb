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
//! wakes its autoscaler), `Client::modify` through the reconcile's client;
//! the replicaset controller is `examples/support/workloads.rs`'s. The
//! users' demand, the monitor and the summary are in `world.rs`.
//!
//! ```sh
//! cargo run --example autoscaler                  # ~8 s
//! cargo run --example autoscaler -- --duration 60
//! cargo run --example autoscaler -- --forever
//! ```

#[path = "../support/mod.rs"]
mod support;
#[path = "../support/workloads.rs"]
mod workloads;
mod world;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::{BoxError, Cache, Informer, Revision};
use tokio::time::Instant;

use support::Clock;
use workloads::{Pod, ReplicaSet};
use world::{Metrics, World};

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

/// Observe the load and the ReplicaSet, compare with the target, act on
/// the ReplicaSet's replica count.
struct Scale {
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
            let sets = ctx.client::<ReplicaSet>().expect("writes replica sets");
            sets.modify(&rs.name, |rs| rs.replicas = wanted).await?;
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

const TARGET_CPU: f64 = 50.0;

/// Both controllers, their informers and the simulation's tasks.
fn manager(world: &World, clock: Clock, duration: Option<Duration>) -> Result<Manager, BoxError> {
    let mut manager = Manager::builder().build()?;
    let startup = Duration::from_millis(300);
    let stats = Arc::clone(&world.sets);
    let (rs_cache, pod_cache) = workloads::add_replicasets(
        &mut manager,
        &world.replicasets,
        &world.pods,
        clock,
        stats,
        startup,
    )?;
    let hpa_cache = manager.informer("autoscalers", || {
        Informer::builder(world.autoscalers.clone()).build()
    })?;
    let scale = Scale {
        pods: pod_cache.cache(),
        metrics: world.metrics.clone(),
        clock,
        recommendations: Mutex::default(),
        scalings: Arc::clone(&world.scalings),
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
        .client(world.replicasets.client())
        .build()?;
    manager.add_controller(controller)?;
    world.add_tasks(&mut manager, duration)?;
    Ok(manager)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("autoscaler", 8.0);
    let clock = Clock::start();
    let world = World::new();
    let manager = manager(&world, clock, duration)?;
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
