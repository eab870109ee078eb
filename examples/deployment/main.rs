//! A Deployment, two controllers deep: the deployment controller
//! reconciles ReplicaSets toward a target image and replica count, the
//! replicaset controller reconciles pods toward each set's count. A
//! rolling update from `myapp:1.4.0` to `myapp:1.5.0` keeps within max
//! surge (at most `replicas + max_surge` pods) and max unavailable (at
//! least `replicas - max_unavailable` ready) while chaos deletes pods, and
//! a rollback at the end returns to 1.4.0 the same way. A monitor
//! (`monitor.rs`) reads the pods themselves (not any cache) and reports
//! the bounds it saw; chaos, the timeline and the summary are in
//! `world.rs`.
//!
//! tend features: two controllers stacked in one `Manager` over shared
//! informers (the deployment controller `owns` replica sets and `watches`
//! pods through their label; the replicaset controller `owns` pods),
//! indexes, `create` and `modify` through the reconcile's client. The
//! deployment controller also decides from pods the other controller
//! writes, which its cache may lag (read-your-writes covers only its own
//! writes): it computes every count as an absolute value from one cached
//! state, bounded conservatively (a set counts for the larger of its count
//! and its cached pods, its ready pods for at most its count), so a stale
//! reconcile repeats a decision instead of exceeding a bound.
//!
//! ```sh
//! cargo run --example deployment                  # ~8 s
//! cargo run --example deployment -- --duration 60
//! cargo run --example deployment -- --forever
//! ```

#[path = "../support/chaos.rs"]
mod chaos;
mod monitor;
#[path = "../support/mod.rs"]
mod support;
#[path = "../support/workloads.rs"]
mod workloads;
mod world;

use std::sync::Arc;
use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::{BoxError, CancellationToken, Informer, Revision};

use support::Clock;
use workloads::{Pod, ReplicaSet};
use world::World;

/// The desired state: `replicas` pods of `image`, replaced at most
/// `max_surge` over and `max_unavailable` under the count at a time.
#[derive(Debug, Clone, PartialEq)]
struct Deployment {
    name: String,
    image: String,
    replicas: usize,
    max_surge: usize,
    max_unavailable: usize,
    version: Revision,
}

tend::impl_object!(Deployment, key: name: String, version: version);

/// The replica set of a deployment's image: `myapp-1.5.0`.
fn set_name(deployment: &str, image: &str) -> String {
    format!("{deployment}-{}", image.rsplit(':').next().unwrap_or(image))
}

/// One set as the deployment controller sees it.
struct Observed {
    set: Arc<ReplicaSet>,
    /// Pods cached for it, and how many of them are ready.
    pods: usize,
    ready: usize,
}

impl Observed {
    fn new(set: Arc<ReplicaSet>, pods: &[Arc<Pod>]) -> Self {
        let own: Vec<_> = pods.iter().filter(|p| p.owner == set.name).collect();
        let ready = own.iter().filter(|p| p.ready).count();
        Self {
            pods: own.len(),
            ready,
            set,
        }
    }

    /// Pods it may have: its count, or more while its surplus is deleted.
    fn counted(&self) -> usize {
        self.set.replicas.max(self.pods)
    }

    /// Ready pods it will keep: no more than its count.
    fn available(&self) -> usize {
        self.set.replicas.min(self.ready)
    }
}

/// Observe the deployment's sets and pods, compare with its template and
/// bounds, act by creating or scaling one step of the rollout.
struct Deployments {
    clock: Clock,
}

impl Reconciler<Deployment> for Deployments {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Deployment>) -> Result<Action, ClientError> {
        let Some(deployment) = ctx.object() else {
            return Ok(Action::Done); // deleting a deployment is not shown here
        };
        let sets = ctx.cache::<ReplicaSet>().expect("owns replica sets");
        let pods = ctx.cache::<Pod>().expect("watches pods");
        let pods = pods.by_index("app", ctx.key()).unwrap_or_default();
        let client = ctx.client::<ReplicaSet>().expect("writes replica sets");
        let mut observed: Vec<Observed> = sets
            .by_index("app", ctx.key())
            .unwrap_or_default()
            .into_iter()
            .map(|set| Observed::new(set, &pods))
            .collect();
        observed.sort_by(|a, b| a.set.name.cmp(&b.set.name));
        let new_name = set_name(&deployment.name, &deployment.image);
        let act = match observed.iter().position(|o| o.set.name == new_name) {
            None => create_set(&client, deployment, &new_name, &observed).await?,
            Some(new) => step(&client, deployment, new, &observed).await?,
        };
        let Some(act) = act else {
            return Ok(Action::Done);
        };
        let sets: Vec<String> = observed
            .iter()
            .map(|o| format!("{} {}/{} ready", o.set.name, o.ready, o.set.replicas))
            .collect();
        println!(
            "{} deployment {} ({}) | observe: {} | compare: want {} × {}, ≤ {} pods, ≥ {} ready | act: {act}",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
            if sets.is_empty() {
                "no sets".to_owned()
            } else {
                sets.join(", ")
            },
            deployment.replicas,
            deployment.image,
            deployment.replicas + deployment.max_surge,
            deployment
                .replicas
                .saturating_sub(deployment.max_unavailable),
        );
        Ok(Action::Done)
    }
}

/// Creates the set of the current image, as large as the surge allows.
async fn create_set(
    sets: &Client<ReplicaSet>,
    deployment: &Deployment,
    name: &str,
    observed: &[Observed],
) -> Result<Option<String>, ClientError> {
    let counted: usize = observed.iter().map(Observed::counted).sum();
    let room = (deployment.replicas + deployment.max_surge).saturating_sub(counted);
    let set = ReplicaSet {
        name: name.to_owned(),
        app: deployment.name.clone(),
        image: deployment.image.clone(),
        replicas: room.min(deployment.replicas),
        version: Revision::ZERO,
    };
    let replicas = set.replicas;
    match sets.create(set).await {
        Ok(_) => Ok(Some(format!("create {name} with {replicas}"))),
        Err(ClientError::AlreadyExists { .. }) => Ok(None), // ours, not yet cached
        Err(error) => Err(error),
    }
}

/// One step: scale the new set up within the surge, or the old ones
/// down within the unavailability.
async fn step(
    sets: &Client<ReplicaSet>,
    deployment: &Deployment,
    new: usize,
    observed: &[Observed],
) -> Result<Option<String>, ClientError> {
    let counted: usize = observed.iter().map(Observed::counted).sum();
    let current = observed[new].set.replicas;
    let room = (deployment.replicas + deployment.max_surge).saturating_sub(counted);
    let wanted = if current > deployment.replicas {
        deployment.replicas
    } else {
        deployment.replicas.min(current + room)
    };
    if wanted != current {
        return scale(sets, &observed[new].set.name, current, wanted).await;
    }
    // Down: first what is not ready anyway (it costs no availability),
    // then what the ready pods beyond the minimum allow.
    let min_available = deployment
        .replicas
        .saturating_sub(deployment.max_unavailable);
    let new_unready = current - observed[new].available();
    let specified: usize = observed.iter().map(|o| o.set.replicas).sum();
    let mut budget = specified.saturating_sub(min_available + new_unready);
    let available: usize = observed.iter().map(Observed::available).sum();
    let mut spare = available.saturating_sub(min_available);
    let mut acts = Vec::new();
    let olds = observed.iter().enumerate().filter(|(i, _)| *i != new);
    for (_, old) in olds.filter(|(_, o)| o.set.replicas > 0) {
        let unready = (old.set.replicas - old.available()).min(budget);
        budget -= unready;
        let ready_cut = spare.min(old.set.replicas - unready);
        spare -= ready_cut;
        let wanted = old.set.replicas - unready - ready_cut;
        if wanted != old.set.replicas {
            acts.extend(scale(sets, &old.set.name, old.set.replicas, wanted).await?);
        }
    }
    Ok((!acts.is_empty()).then(|| acts.join(", ")))
}

async fn scale(
    sets: &Client<ReplicaSet>,
    set: &str,
    from: usize,
    to: usize,
) -> Result<Option<String>, ClientError> {
    sets.modify(&set.to_owned(), |rs| rs.replicas = to).await?;
    Ok(Some(format!("scale {set} {from} → {to}")))
}

/// Both controllers, their informers, the monitor, and chaos until the
/// returned token is cancelled (or the manager stops).
fn manager(world: &World, clock: Clock) -> Result<(Manager, CancellationToken), BoxError> {
    let mut manager = Manager::builder().build()?;
    let startup = Duration::from_millis(300);
    let (rs_cache, pod_cache) = workloads::add_replicasets(
        &mut manager,
        &world.replicasets,
        &world.pods,
        clock,
        Arc::clone(&world.sets),
        startup,
    )?;
    let deployment_cache = manager.informer("deployments", || {
        Informer::builder(world.deployments.clone()).build()
    })?;
    let controller = manager
        .controller("deployment", &deployment_cache, Deployments { clock })
        .owns(&rs_cache, |rs: &ReplicaSet| Some(rs.app.clone()))
        .watches(&pod_cache, |p: &Pod| vec![p.app.clone()])
        .client(world.replicasets.client())
        .build()?;
    manager.add_controller(controller)?;
    let chaos = world.add_tasks(&mut manager, clock)?;
    Ok((manager, chaos))
}

const REPLICAS: usize = 6;
const MAX_SURGE: usize = 1;
const MAX_UNAVAILABLE: usize = 1;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("deployment", 8.0);
    let clock = Clock::start();
    let world = World::new();
    let (manager, chaos) = manager(&world, clock)?;
    let stop = manager.shutdown_token();

    println!(
        "declare: Deployment myapp wants {REPLICAS} × myapp:1.4.0, max surge {MAX_SURGE}, max unavailable {MAX_UNAVAILABLE}"
    );
    let myapp = Deployment {
        name: "myapp".into(),
        image: "myapp:1.4.0".into(),
        replicas: REPLICAS,
        max_surge: MAX_SURGE,
        max_unavailable: MAX_UNAVAILABLE,
        version: Revision::ZERO,
    };
    world.deployments.client().create(myapp).await?;
    let running = tokio::spawn(manager.run());
    support::play(&stop, world.timeline(clock, duration, &chaos)).await?;
    running.await??;
    println!("{}", world.summary());
    Ok(())
}
