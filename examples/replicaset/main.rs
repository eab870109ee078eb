//! The reconciliation loop of the seed text, runnable: a ReplicaSet `web`
//! wants 4 pods; chaos deletes pods and kills nodes; the controller observes,
//! compares and acts until the declared state is true again. Mid-run the
//! declared state changes (4 → 6 → 3) and the loop follows it. The nodes,
//! chaos and the monitor are in `world.rs`.
//!
//! ```sh
//! cargo run --example replicaset                  # ~20 s
//! cargo run --example replicaset -- --duration 60
//! cargo run --example replicaset -- --forever
//! ```

#[path = "../support/chaos.rs"]
mod chaos;
#[path = "../support/mod.rs"]
mod support;
mod world;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::ClientError;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::{BoxError, Informer, Revision};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use support::Clock;
use world::{Stats, World};

/// The desired state: how many pods of a template.
#[derive(Debug, Clone)]
struct ReplicaSet {
    name: String,
    replicas: usize,
    version: Revision,
}

/// The actual state: a pod on a node, pending until the node starts it.
#[derive(Debug, Clone)]
struct Pod {
    name: String,
    owner: String,
    node: usize,
    running: bool,
    version: Revision,
}

tend::impl_object!(ReplicaSet, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);

const NODES: usize = 3;

/// Observe → compare → act for one ReplicaSet. It trusts the cache: its
/// writes go through the reconcile's client, so its next reconcile waits
/// until the cache shows them (read-your-writes) and never creates a pod
/// twice. No hand-written "expectations".
struct ReplicaSetController {
    clock: Clock,
    stats: Arc<Mutex<Stats>>,
}

impl Reconciler<ReplicaSet> for ReplicaSetController {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ReplicaSet>) -> Result<Action, Infallible> {
        let cache = ctx.cache::<Pod>().expect("the controller watches pods");
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        let live = cache.by_index("owner", ctx.key()).unwrap_or_default();
        let desired = ctx.object().map_or(0, |rs| rs.replicas);
        let actual = live.len();
        let running = live.iter().filter(|p| p.running).count();
        let mut act = Vec::new();
        for _ in actual..desired {
            let pod = Pod {
                name: format!("{}-{}", ctx.key(), random_suffix()),
                owner: ctx.key().clone(),
                node: fastrand::usize(..NODES),
                running: false,
                version: Revision::ZERO,
            };
            if let Ok(pod) = pods.create(pod).await {
                act.push(format!("create {} on node-{}", pod.name, pod.node));
                self.stats.lock().expect("not poisoned").created += 1;
            }
        }
        // Scale down: pending pods first, then the newest.
        let mut surplus = live.clone();
        surplus.sort_by_key(|p| (p.running, std::cmp::Reverse(p.version)));
        for pod in surplus.into_iter().take(actual.saturating_sub(desired)) {
            if pods.delete(&pod.name).await.is_ok() {
                act.push(format!("delete {}", pod.name));
                self.stats.lock().expect("not poisoned").removed += 1;
            }
        }
        let act = if act.is_empty() {
            String::from("nothing to do")
        } else {
            act.join(", ")
        };
        println!(
            "{} reconcile {} ({}) | observe: {} pods, {} running | compare: want {} | act: {}",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
            actual,
            running,
            desired,
            act,
        );
        Ok(Action::Done)
    }
}

fn random_suffix() -> String {
    (0..5)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

/// The controller over the world's stores: it owns the pods (indexed by
/// owner) and writes them through the reconcile's client. Its informers
/// run in `tasks` until `stop`.
fn controller(
    world: &World,
    clock: Clock,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Result<Controller<ReplicaSet, ReplicaSetController>, BoxError> {
    let rs_informer = Informer::builder(world.replicasets.clone()).build()?;
    let pod_informer = Informer::builder(world.pods.clone())
        .index("owner", |pod: &Pod| vec![pod.owner.clone()])
        .build()?;
    let reconciler = ReplicaSetController {
        clock,
        stats: Arc::clone(&world.stats),
    };
    let controller = Controller::builder("replicaset", &rs_informer, reconciler)
        .owns(&pod_informer, |pod: &Pod| Some(pod.owner.clone()))
        .client(world.pods.client())
        .resync(Duration::from_secs(10))
        .build()?;
    let (informer, until) = (rs_informer, stop.clone());
    tasks.spawn(async move { drop(informer.run(until).await) });
    let (informer, until) = (pod_informer, stop.clone());
    tasks.spawn(async move { drop(informer.run(until).await) });
    Ok(controller)
}

/// The declared state changes at 35 % and 65 % of the run; chaos stops at
/// 85 %, leaving the loop time to close the last gap.
async fn timeline(
    replicasets: &MemoryStore<ReplicaSet>,
    clock: Clock,
    duration: Option<Duration>,
    chaos: &CancellationToken,
) -> Result<(), ClientError> {
    for (at, replicas) in [(0.35, 6), (0.65, 3)] {
        clock.at(duration, at).await;
        let mut web = replicasets.get(&"web".to_owned()).expect("web exists");
        web.replicas = replicas;
        replicasets.client().update(web).await?;
        println!(
            "{} declare: ReplicaSet web now wants {replicas} pods",
            clock.stamp()
        );
    }
    clock.at(duration, 0.85).await;
    chaos.cancel();
    println!("{} chaos stops", clock.stamp());
    clock.at(duration, 1.0).await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("replicaset", 20.0);
    let clock = Clock::start();
    let world = World::new();
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let controller = controller(&world, clock, &mut tasks, &stop)?;

    println!("declare: ReplicaSet web wants 4 pods on {NODES} nodes");
    let web = ReplicaSet {
        name: "web".into(),
        replicas: 4,
        version: Revision::ZERO,
    };
    world.replicasets.client().create(web).await?;
    let chaos = stop.child_token();
    world.spawn(&mut tasks, clock, &stop, &chaos);
    let controller = tokio::spawn(controller.run(stop.clone()));
    support::play(&stop, timeline(&world.replicasets, clock, duration, &chaos)).await?;
    controller.await??;
    while tasks.join_next().await.is_some() {}
    println!("{}", world.summary());
    Ok(())
}
