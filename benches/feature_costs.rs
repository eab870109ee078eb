//! What features cost on the hot path when present but unused: the
//! realistic benches' work (ConfigMap-like objects of about 1.7 KB,
//! `ObjectKey` keys, a no-op reconciler that reads the cached object) on one
//! runtime thread, so that a run under callgrind counts the same
//! instructions each time.
//!
//! One figure per process, `TEND_BENCH=sync` (default) or `latency`:
//! - sync: `TEND_COUNT` objects (default 20,000) listed, each reconciled once;
//! - latency: `TEND_COUNT` changes (default 5,000) over 1,000 keys, each sent
//!   once the last was reconciled, so each takes the whole path from an idle
//!   controller: the informer's wake-up, the cache, the queue, a worker's
//!   wake-up, the reconcile.
//!
//! `TEND_RYW=off` turns read-your-writes off. It prints the wall time per
//! object or change. `python3 benches/feature_costs.py` builds the crate
//! without each feature (`--cfg tend_without=...`), counts each build's
//! instructions under callgrind and prints the table of
//! `docs/performance.md`.

#[path = "support/config_map.rs"]
mod config_map;
#[path = "support/sources.rs"]
mod sources;

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use config_map::{ConfigMap, config_map};
use parking_lot::Mutex;
use sources::{Channel, Listed, update};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::{CancellationToken, Informer, Source};
use tokio::sync::{Notify, mpsc};

/// Keys the latency figure's changes go round.
const KEYS: usize = 1_000;

/// Reads each reconciled object; counts the reconciles, and wakes the
/// driver once they reach its target (cheaper than a watch channel, whose
/// send is a few hundred instructions of the figure).
#[derive(Default)]
struct Reads {
    reconciled: AtomicUsize,
    target: AtomicUsize,
    reached: Notify,
}

impl Reconciler<ConfigMap> for Arc<Reads> {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        if let Some(object) = ctx.object() {
            std::hint::black_box(object.data.len());
        }
        let reconciled = self.reconciled.fetch_add(1, Ordering::AcqRel) + 1;
        if reconciled >= self.target.load(Ordering::Acquire) {
            self.reached.notify_one();
        }
        Ok(Action::Done)
    }
}

/// Starts an informer and a controller over `source`. They run until the
/// process exits: their teardown (freeing the cache) would be counted, the
/// same in every build, diluting the figures.
fn running(source: impl Source<Object = ConfigMap>) -> Arc<Reads> {
    let informer = Informer::builder(source).build().expect("valid");
    let reads = Arc::new(Reads::default());
    let mut builder = Controller::builder("costs", &informer, Arc::clone(&reads))
        .concurrency(NonZeroUsize::new(4).expect("non-zero"));
    if std::env::var("TEND_RYW").is_ok_and(|ryw| ryw == "off") {
        builder = builder.read_your_writes(None);
    }
    let controller = builder.build().expect("valid");
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move { informer.run(stop).await }
    });
    tokio::spawn(controller.run(stop));
    reads
}

/// Waits until `reads` counted `count` reconciles.
async fn until(reads: &Reads, count: usize) {
    reads.target.store(count, Ordering::Release);
    loop {
        let reached = reads.reached.notified();
        if reads.reconciled.load(Ordering::Acquire) >= count {
            return;
        }
        reached.await;
    }
}

/// Lists `count` objects; the time until each was reconciled.
async fn sync(count: usize) -> Duration {
    let objects: Vec<ConfigMap> = (0..count).map(config_map).collect();
    let start = Instant::now();
    until(&running(Listed(Mutex::new(Some(objects)))), count).await;
    start.elapsed()
}

/// Sends `count` changes one at a time, each once the last was reconciled.
async fn latency(count: usize) -> Duration {
    let templates: Vec<ConfigMap> = (0..KEYS).map(config_map).collect();
    let changes: Vec<ConfigMap> = (0..count).map(|n| update(&templates, n)).collect();
    let (tx, rx) = mpsc::unbounded_channel();
    let reads = running(Channel::new(rx));
    let start = Instant::now();
    for (n, change) in changes.into_iter().enumerate() {
        tx.send(change).expect("the informer watches");
        until(&reads, n + 1).await;
    }
    start.elapsed()
}

fn main() {
    // One thread runs the informer and the controller; the main thread
    // builds the objects and drives.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("runtime");
    // Never dropped: its shutdown would free the cache on the runtime's
    // thread, counted with the figure.
    let runtime = Box::leak(Box::new(runtime));
    let figure = std::env::var("TEND_BENCH").unwrap_or_else(|_| "sync".to_owned());
    let count = std::env::var("TEND_COUNT")
        .ok()
        .and_then(|n| n.parse().ok());
    let (count, took) = match figure.as_str() {
        "latency" => {
            let count = count.unwrap_or(5_000);
            (count, runtime.block_on(latency(count)))
        }
        _ => {
            let count = count.unwrap_or(20_000);
            (count, runtime.block_on(sync(count)))
        }
    };
    let per = took.as_secs_f64() * 1e6 / count as f64;
    println!(
        "{figure}: {count} in {:.3} s, {per:.2} µs each",
        took.as_secs_f64()
    );
}
