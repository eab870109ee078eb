//! Informer benchmarks.
//!
//! - `initial_sync`: list N small objects from the memory backend into an
//!   informer's cache (objects/s), against `hashmap_baseline`: inserting the
//!   same `Arc`s into a plain `HashMap`.
//! - `apply_updates`: apply watch events (updates to existing keys) with two
//!   subscribers (events/s), from a source that replays a prepared stream so
//!   that only the informer is measured.
//! - Before the timed runs (with `cargo bench` only), the heap bytes each
//!   cached object costs beyond the object itself, counted by a counting
//!   global allocator, against the same plain `HashMap`; and the same for a
//!   whole controller (informer, queue, workers) once its initial sync has
//!   drained.
//!
//! Run with `cargo bench --bench informer`. Under `cargo test --benches` the
//! sizes are divided by 1,000 so that the suite stays fast.

use std::alloc::System;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use divan::Bencher;
use divan::counter::ItemsCount;
use futures::StreamExt;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tend::memory::MemoryStore;
use tend::{Change, Event, Informer, Revision, Snapshot, Source, SourceError, WatchStream};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SIZES: [usize; 2] = [100_000, 1_000_000];
const UPDATE_KEYS: usize = 10_000;
const UPDATES: usize = 1_000_000;

/// A small object: 24 bytes, keyed by a `u64`.
#[derive(Debug, Clone)]
struct Small {
    id: u64,
    value: u64,
    version: Revision,
}

tend::impl_object!(Small, key: id: u64, version: version);

fn benching() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// `n`, or `n / 1000` when not running as a benchmark.
fn scaled(n: usize) -> usize {
    if benching() { n } else { (n / 1_000).max(10) }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

fn seeded_store(n: usize) -> MemoryStore<Small> {
    let store = MemoryStore::with_history("small", std::num::NonZeroUsize::MIN);
    for id in 0..n as u64 {
        store.put(Small {
            id,
            value: id,
            version: Revision::ZERO,
        });
    }
    store
}

/// Runs `informer` until its first list is applied.
async fn sync(informer: &Informer<Small>) {
    let cancel = CancellationToken::new();
    let wait = async {
        informer
            .wait_synced(Duration::from_secs(600))
            .await
            .expect("synced");
        cancel.cancel();
    };
    let (run, ()) = tokio::join!(informer.run(cancel.clone()), wait);
    run.expect("informer run");
}

fn live_bytes() -> isize {
    let stats = GLOBAL.stats();
    // A realloc's growth or shrink is in `bytes_allocated` or
    // `bytes_deallocated` already; `bytes_reallocated` repeats it.
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn initial_sync(bencher: Bencher, n: usize) {
    let n = scaled(n);
    let store = seeded_store(n);
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| (runtime(), Informer::builder(store.clone()).build().unwrap()))
        .bench_local_values(|(runtime, informer)| {
            runtime.block_on(sync(&informer));
            (runtime, informer)
        });
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn hashmap_baseline(bencher: Bencher, n: usize) {
    let n = scaled(n);
    let arcs: Vec<(u64, Arc<Small>)> = (0..n as u64)
        .map(|id| {
            let object = Small {
                id,
                value: id,
                version: Revision::new(id + 1),
            };
            (id, Arc::new(object))
        })
        .collect();
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| arcs.clone())
        .bench_local_values(|arcs| {
            let mut map = HashMap::with_capacity(arcs.len());
            for (key, object) in arcs {
                map.insert(key, object);
            }
            map
        });
}

/// A source that lists a prepared snapshot and then replays prepared
/// changes once (later watches never deliver anything).
struct Replay {
    snapshot: Snapshot<Small>,
    changes: Mutex<Option<Vec<Change<Small>>>>,
}

#[async_trait]
impl Source for Replay {
    type Object = Small;

    fn name(&self) -> &str {
        "replay"
    }

    async fn list(&self) -> Result<Snapshot<Small>, SourceError> {
        Ok(self.snapshot.clone())
    }

    async fn watch(&self, _from: Revision) -> Result<WatchStream<Small>, SourceError> {
        match self.changes.lock().unwrap().take() {
            Some(changes) => Ok(futures::stream::iter(changes.into_iter().map(Ok)).boxed()),
            None => Ok(futures::stream::pending().boxed()),
        }
    }
}

/// An informer over `keys` objects about to receive `updates` updates, two
/// subscribers (one cancels the run at the last update), and the token.
fn update_run(
    keys: usize,
    updates: usize,
) -> (
    Informer<Small>,
    CancellationToken,
    Vec<tend::Subscription<Small>>,
) {
    let objects: Vec<Small> = (0..keys as u64)
        .map(|id| Small {
            id,
            value: 0,
            version: Revision::new(id + 1),
        })
        .collect();
    let base = keys as u64;
    let mut rng = fastrand::Rng::with_seed(1);
    let changes: Vec<Change<Small>> = (1..=updates as u64)
        .map(|step| {
            Change::Applied(Small {
                id: rng.u64(0..base),
                value: step,
                version: Revision::new(base + step),
            })
        })
        .collect();
    let last = Revision::new(base + updates as u64);
    let source = Replay {
        snapshot: Snapshot {
            objects,
            revision: Revision::new(base),
        },
        changes: Mutex::new(Some(changes)),
    };
    let informer = Informer::builder(source).build().unwrap();
    let cancel = CancellationToken::new();
    let seen = Arc::new(AtomicU64::new(0));
    let first = informer.subscribe({
        let cancel = cancel.clone();
        move |event: &Event<Small>| {
            if event.object().version == last {
                cancel.cancel();
            }
        }
    });
    let second = informer.subscribe(move |event: &Event<Small>| {
        seen.fetch_add(divan::black_box(event.object().id) & 1, Ordering::Relaxed);
    });
    (informer, cancel, vec![first, second])
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn apply_updates(bencher: Bencher) {
    let updates = scaled(UPDATES);
    let keys = scaled(UPDATE_KEYS);
    bencher
        .counter(ItemsCount::new(updates))
        .with_inputs(|| (runtime(), update_run(keys, updates)))
        .bench_local_values(|(runtime, (informer, cancel, subscriptions))| {
            runtime
                .block_on(informer.run(cancel))
                .expect("informer run");
            assert_eq!(informer.stats().events_applied, updates as u64);
            (runtime, informer, subscriptions)
        });
}

/// Heap bytes per cached object beyond the object itself, for the informer
/// and for a plain `HashMap` of the same `Arc`s.
fn report_overhead(n: usize) {
    let runtime = runtime();
    let store = seeded_store(n);
    let informer = Informer::builder(store.clone()).build().unwrap();
    let before = live_bytes();
    runtime.block_on(sync(&informer));
    let cached = live_bytes() - before;
    // An `Arc<Small>` allocation: two counters and the object.
    let object = (2 * size_of::<usize>() + size_of::<Small>()) as isize;
    let n_signed = n as isize;
    let informer_overhead = cached / n_signed - object;

    let arcs = informer.cache().list();
    let before = live_bytes();
    let mut map = HashMap::with_capacity(arcs.len());
    for object in &arcs {
        map.insert(object.id, Arc::clone(object));
    }
    let baseline = (live_bytes() - before) / n_signed;
    println!(
        "heap per cached object beyond the object ({object} B), n = {n}: informer {informer_overhead} B, plain HashMap {baseline} B"
    );
    drop((map, arcs, informer));

    let indexed = Informer::builder(store)
        .index("by_bucket", |object: &Small| {
            vec![(object.value % 100).to_string()]
        })
        .build()
        .unwrap();
    let before = live_bytes();
    runtime.block_on(sync(&indexed));
    let with_index = (live_bytes() - before) / n_signed - object;
    println!("  with one index (100 values): {with_index} B");
}

/// Counts its reconciles; does nothing else.
struct Counting(Arc<AtomicU64>);

impl tend::controller::Reconciler<Small> for Counting {
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        ctx: tend::controller::Context<Small>,
    ) -> Result<tend::controller::Action, Self::Error> {
        std::hint::black_box(ctx.object());
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(tend::controller::Action::Done)
    }
}

/// Heap bytes per object beyond the object itself for a whole controller
/// (informer, queue, workers) once its initial sync has drained: every key
/// reconciled once and the queue empty again.
fn report_controller_overhead(n: usize) {
    let runtime = runtime();
    let store = seeded_store(n);
    let before = live_bytes();
    let held = runtime.block_on(async {
        let informer = Informer::builder(store.clone()).build().unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let controller =
            tend::controller::Controller::builder("bench", &informer, Counting(Arc::clone(&count)))
                .build()
                .unwrap();
        let queue = controller.queue();
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        let controlling = tokio::spawn(controller.run(stop.clone()));
        while count.load(Ordering::Relaxed) < n as u64 || queue.stats().in_flight > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (informer, queue, stop, running, controlling)
    });
    let whole = (live_bytes() - before) / n as isize;
    let object = (2 * size_of::<usize>() + size_of::<Small>()) as isize;
    println!(
        "heap per object beyond the object ({object} B), n = {n}, whole controller after its initial sync: {} B",
        whole - object
    );
    let (_informer, _queue, stop, running, controlling) = held;
    stop.cancel();
    runtime.block_on(async {
        let _ = running.await;
        let _ = controlling.await;
    });
}

fn main() {
    if benching() {
        for n in SIZES {
            report_overhead(n);
            report_controller_overhead(n);
        }
    }
    divan::main();
}
