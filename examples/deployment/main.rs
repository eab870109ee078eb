//! A Deployment, two controllers deep: the deployment controller
//! reconciles ReplicaSets toward a target image and replica count, the
//! replicaset controller reconciles pods toward each set's count. A
//! rolling update from `myapp:1.4.0` to `myapp:1.5.0` keeps within max
//! surge (at most `replicas + max_surge` pods) and max unavailable (at
//! least `replicas - max_unavailable` ready) while chaos deletes pods, and
//! a rollback at the end returns to 1.4.0 the same way. A monitor reads
//! the pods themselves (not any cache) and reports the bounds it saw.
//!
//! tend features: two controllers stacked in one `Manager` over shared
//! informers (the deployment controller `owns` replica sets and `watches`
//! pods through their label; the replicaset controller `owns` pods),
//! indexes, `Client::create` and `Client::modify`. Both controllers
//! decide from their caches, which may lag their own writes: the
//! deployment controller computes every count as an absolute value from
//! one cached state and bounds it conservatively (a set counts for the
//! larger of its count and its cached pods, its ready pods for at most its
//! count), so a stale reconcile repeats a decision instead of exceeding a
//! bound; the replicaset controller (`examples/support/workloads.rs`)
//! names its pods deterministically.
//!
//! ```sh
//! cargo run --example deployment                  # ~8 s
//! cargo run --example deployment -- --duration 60
//! cargo run --example deployment -- --forever
//! ```

mod monitor;
#[path = "../support/mod.rs"]
mod support;
#[path = "../support/workloads.rs"]
mod workloads;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken, Informer, Revision};
use tokio::time::Instant;

use monitor::{CHAOS_GRACE, Monitor, run_monitor};
use support::{Clock, Summary, verdict};
use workloads::{Pod, ReplicaSet, SetStats};

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
    replicasets: Client<ReplicaSet>,
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
        let mut observed: Vec<Observed> = sets
            .by_index("app", ctx.key())
            .unwrap_or_default()
            .into_iter()
            .map(|set| {
                let own = pods.iter().filter(|p| p.owner == set.name);
                let (count, ready) =
                    own.fold((0, 0), |(n, r), p| (n + 1, r + usize::from(p.ready)));
                Observed {
                    set,
                    pods: count,
                    ready,
                }
            })
            .collect();
        observed.sort_by(|a, b| a.set.name.cmp(&b.set.name));
        let new_name = set_name(&deployment.name, &deployment.image);
        let act = match observed.iter().position(|o| o.set.name == new_name) {
            None => self.create_set(deployment, &new_name, &observed).await?,
            Some(new) => self.step(deployment, new, &observed).await?,
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

impl Deployments {
    /// Creates the set of the current image, as large as the surge allows.
    async fn create_set(
        &self,
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
        match self.replicasets.create(set).await {
            Ok(_) => Ok(Some(format!("create {name} with {replicas}"))),
            Err(ClientError::AlreadyExists { .. }) => Ok(None), // ours, not yet cached
            Err(error) => Err(error),
        }
    }

    /// One step: scale the new set up within the surge, or the old ones
    /// down within the unavailability.
    async fn step(
        &self,
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
            return self.scale(&observed[new].set.name, current, wanted).await;
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
                acts.extend(self.scale(&old.set.name, old.set.replicas, wanted).await?);
            }
        }
        Ok((!acts.is_empty()).then(|| acts.join(", ")))
    }

    async fn scale(
        &self,
        set: &str,
        from: usize,
        to: usize,
    ) -> Result<Option<String>, ClientError> {
        self.replicasets
            .modify(&set.to_owned(), |rs| rs.replicas = to)
            .await?;
        Ok(Some(format!("scale {set} {from} → {to}")))
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
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return Ok(()),
        }
        let all = pods.snapshot().objects;
        let Some(pod) = fastrand::choice(&all) else {
            continue;
        };
        monitor
            .lock()
            .expect("not poisoned")
            .chaos_at(Instant::now());
        if pods.client().delete(&pod.name).await.is_ok() {
            println!("{} CHAOS deleted pod {}", clock.stamp(), pod.name);
        }
    }
}

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
struct World {
    deployments: MemoryStore<Deployment>,
    replicasets: MemoryStore<ReplicaSet>,
    pods: MemoryStore<Pod>,
    sets: Arc<Mutex<SetStats>>,
    monitor: Arc<Mutex<Monitor>>,
}

impl World {
    fn new() -> Self {
        Self {
            deployments: MemoryStore::new("deployments"),
            replicasets: MemoryStore::new("replicasets"),
            pods: MemoryStore::new("pods"),
            sets: Arc::default(),
            monitor: Arc::default(),
        }
    }

    /// Both controllers, their informers, the monitor, and chaos until
    /// the returned token is cancelled (or the manager stops).
    fn manager(&self, clock: Clock) -> Result<(Manager, CancellationToken), BoxError> {
        let mut manager = Manager::builder().build()?;
        let startup = Duration::from_millis(300);
        let (rs_cache, pod_cache) = workloads::add_replicasets(
            &mut manager,
            &self.replicasets,
            &self.pods,
            clock,
            Arc::clone(&self.sets),
            startup,
        )?;
        let deployment_cache = manager.informer("deployments", || {
            Informer::builder(self.deployments.clone()).build()
        })?;
        let rollouts = Deployments {
            replicasets: self.replicasets.client(),
            clock,
        };
        let controller = manager
            .controller("deployment", &deployment_cache, rollouts)
            .owns(&rs_cache, |rs: &ReplicaSet| Some(rs.app.clone()))
            .watches(&pod_cache, |p: &Pod| vec![p.app.clone()])
            .build()?;
        manager.add_controller(controller)?;
        let (d, p, m) = (
            self.deployments.clone(),
            self.pods.clone(),
            Arc::clone(&self.monitor),
        );
        manager.add_task("monitor", move |stop| run_monitor(d, p, m, stop))?;
        let chaos = manager.shutdown_token().child_token();
        let (p, m, c) = (self.pods.clone(), Arc::clone(&self.monitor), chaos.clone());
        manager.add_task("chaos", move |_| run_chaos(p, m, clock, c))?;
        Ok((manager, chaos))
    }
}

const REPLICAS: usize = 6;
const MAX_SURGE: usize = 1;
const MAX_UNAVAILABLE: usize = 1;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("deployment", 8.0);
    let clock = Clock::start();
    let world = World::new();
    let (manager, chaos) = world.manager(clock)?;
    let stop = manager.shutdown_token();
    let World {
        deployments,
        replicasets,
        pods,
        sets: set_stats,
        monitor,
    } = world;

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
    deployments.client().create(myapp).await?;
    let running = tokio::spawn(manager.run());
    support::play(&stop, async {
        let roll = |at: f64, image: &'static str, why: &'static str| {
            let deployments = deployments.clone();
            async move {
                clock.at(duration, at).await;
                println!(
                    "{} declare: Deployment myapp now wants myapp:{image} ({why})",
                    clock.stamp()
                );
                deployments
                    .client()
                    .modify(&"myapp".to_owned(), |d| d.image = format!("myapp:{image}"))
                    .await
            }
        };
        roll(0.15, "1.5.0", "the update").await?;
        roll(0.55, "1.4.0", "the rollback").await?;
        clock.at(duration, 0.8).await;
        chaos.cancel();
        println!("{} chaos stops", clock.stamp());
        clock.at(duration, 1.0).await;
        Ok::<_, BoxError>(())
    })
    .await?;
    running.await??;
    println!("{}", summarize(&replicasets, &pods, &monitor, &set_stats));
    Ok(())
}

fn summarize(
    replicasets: &MemoryStore<ReplicaSet>,
    pods: &MemoryStore<Pod>,
    monitor: &Mutex<Monitor>,
    sets: &Mutex<SetStats>,
) -> Summary {
    let monitor = monitor.lock().expect("not poisoned");
    let sets = sets.lock().expect("not poisoned");
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
    let mut all_sets: Vec<String> = replicasets
        .snapshot()
        .objects
        .iter()
        .map(|rs| format!("{} ×{}", rs.name, rs.replicas))
        .collect();
    all_sets.sort();
    let all = pods.snapshot().objects;
    let ready = all
        .iter()
        .filter(|p| p.ready && p.image == "myapp:1.4.0")
        .count();
    let converged = all.len() == REPLICAS && ready == REPLICAS;
    let finished = monitor.rollouts.iter().all(|r| r.took.is_some());
    summary.line(format!(
        "final: myapp runs {} pods, {ready} ready of myapp:1.4.0 ({}); bounds {}: {}",
        all.len(),
        all_sets.join(", "),
        if monitor.violations == 0 {
            "held at every check (2 ms)"
        } else {
            "VIOLATED"
        },
        verdict(converged && finished, "converged"),
    ))
}
