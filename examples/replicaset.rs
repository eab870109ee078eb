//! The reconciliation loop of the seed text, runnable: a ReplicaSet `web`
//! wants 4 pods; chaos deletes pods and kills nodes; the controller observes,
//! compares and acts until the declared state is true again. Mid-run the
//! declared state changes (4 → 6 → 3) and the loop follows it.
//!
//! ```sh
//! cargo run --example replicaset                  # ~20 s
//! cargo run --example replicaset -- --duration 60
//! cargo run --example replicaset -- --forever
//! ```

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::{Informer, Revision};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    clock: Instant,
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
            "[{:>6.2}s] reconcile {} ({}) | observe: {} pods, {} running | compare: want {} | act: {}",
            self.clock.elapsed().as_secs_f64(),
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

#[derive(Default)]
struct Stats {
    created: usize,
    removed: usize,
    chaos_deleted: usize,
    nodes_killed: usize,
    longest_below: Duration,
}

/// The node simulator: a node starts each pending pod on it after a delay.
async fn run_nodes(
    pods: MemoryStore<Pod>,
    down: Arc<Mutex<HashSet<usize>>>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let down = down.lock().expect("not poisoned").clone();
        for pod in pods.snapshot().objects {
            if !pod.running && !down.contains(&pod.node) {
                // A conflict means the pod changed meanwhile: next tick.
                let _ = pods
                    .client()
                    .update(Pod {
                        running: true,
                        ..pod
                    })
                    .await;
            }
        }
    }
}

/// Chaos: every 2 s deletes a random pod, and every third time kills a node.
async fn run_chaos(
    pods: MemoryStore<Pod>,
    down: Arc<Mutex<HashSet<usize>>>,
    stats: Arc<Mutex<Stats>>,
    clock: Instant,
    stop: CancellationToken,
) {
    let mut round = 0u32;
    let mut tick = tokio::time::interval_at(clock + Duration::from_secs(2), Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => break,
        }
        round += 1;
        let all = pods.snapshot().objects;
        let at = clock.elapsed().as_secs_f64();
        down.lock().expect("not poisoned").clear();
        if round.is_multiple_of(3) {
            let node = fastrand::usize(..NODES);
            let lost: Vec<_> = all.iter().filter(|p| p.node == node).collect();
            for pod in &lost {
                let _ = pods.client().delete(&pod.name).await;
            }
            down.lock().expect("not poisoned").insert(node);
            let mut stats = stats.lock().expect("not poisoned");
            stats.nodes_killed += 1;
            stats.chaos_deleted += lost.len();
            println!(
                "[{at:>6.2}s] CHAOS node-{node} died: {} pods lost",
                lost.len()
            );
        } else if !all.is_empty() {
            let pod = &all[fastrand::usize(..all.len())];
            if pods.client().delete(&pod.name).await.is_ok() {
                stats.lock().expect("not poisoned").chaos_deleted += 1;
                println!("[{at:>6.2}s] CHAOS deleted pod {}", pod.name);
            }
        }
    }
    // The end of chaos brings every node back.
    down.lock().expect("not poisoned").clear();
}

/// Measures how long the running pods stay below the declared replicas.
async fn run_monitor(
    replicasets: MemoryStore<ReplicaSet>,
    pods: MemoryStore<Pod>,
    stats: Arc<Mutex<Stats>>,
    stop: CancellationToken,
) {
    let mut below_since: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let desired = replicasets
            .get(&"web".to_owned())
            .map_or(0, |rs| rs.replicas);
        let running = pods.snapshot().objects.iter().filter(|p| p.running).count();
        match (running < desired, below_since) {
            (true, None) => below_since = Some(Instant::now()),
            (false, Some(since)) => {
                let mut stats = stats.lock().expect("not poisoned");
                stats.longest_below = stats.longest_below.max(since.elapsed());
                below_since = None;
            }
            _ => {}
        }
    }
}

fn parse_duration() -> Option<Duration> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--forever") {
        return None;
    }
    let secs = args
        .iter()
        .position(|a| a == "--duration")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(20.0), |s| s.parse::<f64>())
        .unwrap_or_else(|_| {
            eprintln!("usage: replicaset [--duration SECONDS | --forever]");
            std::process::exit(2);
        });
    Some(Duration::from_secs_f64(secs))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let duration = parse_duration();
    let clock = Instant::now();
    let replicasets = MemoryStore::<ReplicaSet>::new("replicasets");
    let pods = MemoryStore::<Pod>::new("pods");
    let rs_informer = Informer::builder(replicasets.clone()).build()?;
    let pod_informer = Informer::builder(pods.clone())
        .index("owner", |pod: &Pod| vec![pod.owner.clone()])
        .build()?;
    let stats = Arc::new(Mutex::new(Stats::default()));
    let controller = Controller::builder(
        "replicaset",
        &rs_informer,
        ReplicaSetController {
            clock,
            stats: Arc::clone(&stats),
        },
    )
    .owns(&pod_informer, |pod: &Pod| Some(pod.owner.clone()))
    .client(pods.client())
    .resync(Duration::from_secs(10))
    .build()?;

    println!("declare: ReplicaSet web wants 4 pods on {NODES} nodes");
    replicasets
        .client()
        .create(ReplicaSet {
            name: "web".into(),
            replicas: 4,
            version: Revision::ZERO,
        })
        .await?;

    let stop = CancellationToken::new();
    let chaos_stop = stop.child_token();
    let down = Arc::new(Mutex::new(HashSet::new()));
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn({
        let (informer, stop) = (rs_informer.clone(), stop.clone());
        async move { drop(informer.run(stop).await) }
    });
    tasks.spawn({
        let (informer, stop) = (pod_informer.clone(), stop.clone());
        async move { drop(informer.run(stop).await) }
    });
    tasks.spawn(run_nodes(pods.clone(), Arc::clone(&down), stop.clone()));
    tasks.spawn(run_chaos(
        pods.clone(),
        down,
        Arc::clone(&stats),
        clock,
        chaos_stop.clone(),
    ));
    tasks.spawn(run_monitor(
        replicasets.clone(),
        pods.clone(),
        Arc::clone(&stats),
        stop.clone(),
    ));
    let controller = tokio::spawn(controller.run(stop.clone()));

    let scale = |at: f64, replicas: usize| {
        let replicasets = replicasets.clone();
        async move {
            if let Some(duration) = duration {
                tokio::time::sleep_until(clock + duration.mul_f64(at)).await;
                let mut rs = replicasets.get(&"web".to_owned()).expect("web exists");
                rs.replicas = replicas;
                let rs = replicasets
                    .client()
                    .update(rs)
                    .await
                    .expect("no other writer");
                println!(
                    "[{:>6.2}s] declare: ReplicaSet web now wants {} pods",
                    clock.elapsed().as_secs_f64(),
                    rs.replicas
                );
            }
        }
    };
    scale(0.35, 6).await;
    scale(0.65, 3).await;
    let Some(duration) = duration else {
        std::future::pending::<()>().await;
        unreachable!("pending never completes");
    };
    // Chaos stops at 85 %, leaving the loop time to close the last gap.
    tokio::time::sleep_until(clock + duration.mul_f64(0.85)).await;
    chaos_stop.cancel();
    println!("[{:>6.2}s] chaos stops", clock.elapsed().as_secs_f64());
    tokio::time::sleep_until(clock + duration).await;
    stop.cancel();
    controller.await??;
    while tasks.join_next().await.is_some() {}
    let final_state = summarize(&replicasets, &pods, &stats);
    println!("{final_state}");
    Ok(())
}

fn summarize(
    replicasets: &MemoryStore<ReplicaSet>,
    pods: &MemoryStore<Pod>,
    stats: &Mutex<Stats>,
) -> String {
    let stats = stats.lock().expect("not poisoned");
    let desired = replicasets
        .get(&"web".to_owned())
        .map_or(0, |rs| rs.replicas);
    let all = pods.snapshot().objects;
    let running = all.iter().filter(|p| p.running).count();
    format!(
        "\nsummary\n  chaos: {} pods deleted, {} nodes killed\n  controller: {} pods created, {} deleted\n  longest time below desired: {:.2?}\n  final: web wants {}, has {} pods ({} running): {}",
        stats.chaos_deleted,
        stats.nodes_killed,
        stats.created,
        stats.removed,
        stats.longest_below,
        desired,
        all.len(),
        running,
        if all.len() == desired && running == desired {
            "converged"
        } else {
            "NOT converged"
        },
    )
}
