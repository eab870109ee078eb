//! The memory of a sharded replica with 1, 2 and 3 replicas over the same
//! 50,000 ConfigMap-like objects (string keys, about 1.7 KB each), 64
//! shards on an in-process membership: each replica an informer, a
//! sharding and a sharded controller with a no-op reconciler, all in one
//! process. Per replica: the heap the replicas hold once every key was
//! reconciled and every cache holds its owner's share (settled), divided
//! by the number of replicas, with caches scoped to the replica's shards
//! (`Sharding::cache_scope`) and, for the baseline, unscoped (every
//! replica caches every object). The peak is the most heap the replicas
//! held at once while starting (each list of a scoped cache is whole
//! before it is filtered), also per replica.
//!
//! ```sh
//! cargo bench --bench sharded_caches
//! cargo bench --bench sharded_caches -- --objects 10000
//! ```

#[path = "support/config_map.rs"]
mod config_map;
#[path = "support/memory.rs"]
mod memory;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tend::controller::{Action, Context, Controller, Environment, Reconciler};
use tend::memory::{MemoryMembershipGroup, MemoryStore};
use tend::placement::Sharding;
use tend::shard::ShardCount;
use tend::{CancellationToken, Informer};
use tokio::task::JoinSet;

use config_map::{ConfigMap, config_map};

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

const SHARDS: u32 = 64;
/// Runs of each configuration; medians are printed.
const RUNS: usize = 3;
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Counts reconciles.
#[derive(Clone, Default)]
struct Count(Arc<AtomicUsize>);

impl Reconciler<ConfigMap> for Count {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        assert!(ctx.object().is_some(), "nothing is deleted here");
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Action::Done)
    }
}

/// One configuration's figures, per replica.
#[derive(Debug, Clone, Copy)]
struct Measured {
    settled: usize,
    peak: usize,
    took: Duration,
}

/// One running replica.
struct Replica {
    informer: Informer<ConfigMap>,
    sharding: Sharding,
}

/// Starts `replicas` replicas over `store` in `tasks`.
fn start(
    store: &MemoryStore<ConfigMap>,
    group: &MemoryMembershipGroup,
    replicas: usize,
    scoped: bool,
    count: &Count,
    stop: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Vec<Replica> {
    (0..replicas)
        .map(|i| {
            let sharding = Sharding::new(group.member(format!("replica-{i}")), group.shard_count());
            let mut builder = Informer::builder(store.clone()).without_lag_probe();
            if scoped {
                builder = builder.scope(sharding.cache_scope());
            }
            let informer = builder.build().expect("valid");
            let controller = Controller::builder("bench", &informer, count.clone())
                .build()
                .expect("valid");
            let env = Environment::new(stop.clone()).ownership(sharding.ownership());
            let (running, halt) = (informer.clone(), stop.clone());
            tasks.spawn(async move { running.run(halt).await.expect("ran") });
            let (following, halt) = (sharding.clone(), stop.clone());
            tasks.spawn(async move { following.run(halt).await.expect("ran") });
            tasks.spawn(async move { controller.run_in(env).await.expect("ran") });
            Replica { informer, sharding }
        })
        .collect()
}

/// Whether every shard is owned, every key reconciled once at least, and
/// each cache holds what it should: its owner's share (scoped) or every
/// object.
fn settled(replicas: &[Replica], objects: usize, scoped: bool, count: &Count) -> bool {
    let owned: usize = replicas
        .iter()
        .map(|replica| replica.sharding.report().owned.len())
        .sum();
    let cached: usize = replicas.iter().map(|r| r.informer.cache().len()).sum();
    let expected = if scoped {
        objects
    } else {
        objects * replicas.len()
    };
    owned == SHARDS as usize && count.0.load(Ordering::Relaxed) >= objects && cached == expected
}

async fn measure(
    store: &MemoryStore<ConfigMap>,
    objects: usize,
    replicas: usize,
    scoped: bool,
) -> Measured {
    let group = MemoryMembershipGroup::new("bench", ShardCount::new(SHARDS).expect("valid"));
    let (count, stop, mut tasks) = (Count::default(), CancellationToken::new(), JoinSet::new());
    let before = memory::reset_peak();
    let started = Instant::now();
    let running = start(store, &group, replicas, scoped, &count, &stop, &mut tasks);
    while !settled(&running, objects, scoped, &count) {
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "not settled within {SETTLE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    // The last evictions and queue shrinks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = memory::live().saturating_sub(before) / replicas;
    let peak = memory::peak().saturating_sub(before) / replicas;
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    drop(running);
    Measured {
        settled,
        peak,
        took,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn objects() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == "--objects")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(50_000)
}

fn main() {
    let objects = objects();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let store = MemoryStore::new("config-maps");
    for i in 0..objects {
        store.put(config_map(i));
    }
    println!("{objects} objects, {SHARDS} shards; per replica, medians of {RUNS}");
    println!("replicas  caches    settled MiB  peak MiB  settled vs 1 replica  took");
    let mib = |bytes: f64| bytes / f64::from(1 << 20);
    for scoped in [false, true] {
        let mut one = None;
        for replicas in 1..=3 {
            let runs: Vec<Measured> = (0..RUNS)
                .map(|_| runtime.block_on(measure(&store, objects, replicas, scoped)))
                .collect();
            let settled = median(runs.iter().map(|m| m.settled as f64).collect());
            let peak = median(runs.iter().map(|m| m.peak as f64).collect());
            let took = median(runs.iter().map(|m| m.took.as_secs_f64()).collect());
            let one = *one.get_or_insert(settled);
            let name = if scoped { "scoped" } else { "every key" };
            println!(
                "{replicas:>8}  {name:<9} {:>11.1}  {:>8.1}  {:>20.2}  {took:.2} s",
                mib(settled),
                mib(peak),
                settled / one,
            );
        }
    }
}
