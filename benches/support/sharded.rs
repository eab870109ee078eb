//! What the sharded-cache benches share (`sharded_caches` on the memory
//! backend, `kube_sharded_caches` on the API server): replicas in one
//! process, each an informer, a sharding over an in-process membership
//! and a sharded controller with a no-op reconciler, measured once every
//! key was reconciled and every cache holds what it should.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tend::controller::{Action, Context, Controller, Environment, Reconciler};
use tend::memory::MemoryMembershipGroup;
use tend::placement::Sharding;
use tend::shard::{ShardCount, ShardKey};
use tend::{CancellationToken, Informer, Object};
use tokio::task::JoinSet;

use super::memory::{self, median};

pub const SHARDS: u32 = 64;
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Counts reconciles.
#[derive(Clone, Default)]
struct Count(Arc<AtomicUsize>);

impl<O: Object> Reconciler<O> for Count {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<O>) -> Result<Action, Infallible> {
        assert!(ctx.object().is_some(), "nothing is deleted here");
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Action::Done)
    }
}

/// One configuration's figures, per replica.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Heap held once settled.
    pub settled: usize,
    /// The most heap held at once while starting.
    pub peak: usize,
    /// Objects sent by the source and left out of the scoped cache.
    pub out_of_scope: u64,
    /// From the start until settled (for all replicas).
    pub took: Duration,
}

/// One running replica.
struct Replica<O: Object> {
    informer: Informer<O>,
    sharding: Sharding,
}

/// Runs `replicas` replicas, each over the informer `informer` builds for
/// its sharding, until every key of `objects` was reconciled and their
/// caches hold `cached` objects in all; measures them.
pub async fn measure<O>(
    objects: usize,
    replicas: usize,
    cached: usize,
    informer: impl Fn(&Sharding) -> Informer<O>,
) -> Measured
where
    O: Object<Key: ShardKey>,
{
    let group = MemoryMembershipGroup::new("bench", ShardCount::new(SHARDS).expect("valid"));
    let (count, stop, mut tasks) = (Count::default(), CancellationToken::new(), JoinSet::new());
    let before = memory::reset_peak();
    let started = Instant::now();
    let running: Vec<Replica<O>> = (0..replicas)
        .map(|i| {
            let sharding = Sharding::new(group.member(format!("replica-{i}")), group.shard_count());
            let informer = informer(&sharding);
            let controller = Controller::builder("bench", &informer, count.clone())
                .build()
                .expect("valid");
            let env = Environment::new(stop.clone()).ownership(sharding.ownership());
            let (watching, halt) = (informer.clone(), stop.clone());
            tasks.spawn(async move { watching.run(halt).await.expect("ran") });
            let (following, halt) = (sharding.clone(), stop.clone());
            tasks.spawn(async move { following.run(halt).await.expect("ran") });
            tasks.spawn(async move { controller.run_in(env).await.expect("ran") });
            Replica { informer, sharding }
        })
        .collect();
    while !settled(&running, objects, cached, &count) {
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
    let out_of_scope = running
        .iter()
        .map(|r| r.informer.stats().out_of_scope)
        .sum::<u64>();
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    drop(running);
    Measured {
        settled,
        peak,
        out_of_scope: out_of_scope / replicas as u64,
        took,
    }
}

/// Whether every shard is owned, every key reconciled once at least, and
/// the caches hold `cached` objects in all.
fn settled<O: Object>(
    replicas: &[Replica<O>],
    objects: usize,
    cached: usize,
    count: &Count,
) -> bool {
    let owned: usize = replicas
        .iter()
        .map(|replica| replica.sharding.report().owned.len())
        .sum();
    let held: usize = replicas.iter().map(|r| r.informer.cache().len()).sum();
    owned == SHARDS as usize && count.0.load(Ordering::Relaxed) >= objects && held == cached
}

/// The medians of `runs`: settled and peak heap, out of scope, seconds.
pub fn medians(runs: &[Measured]) -> (f64, f64, f64, f64) {
    let of = |field: fn(&Measured) -> f64| median(runs.iter().map(field).collect());
    (
        of(|m| m.settled as f64),
        of(|m| m.peak as f64),
        of(|m| m.out_of_scope as f64),
        of(|m| m.took.as_secs_f64()),
    )
}
