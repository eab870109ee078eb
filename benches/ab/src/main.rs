//! One sync or storm of ConfigMap-like objects (1.7 KB, `ObjectKey` keys)
//! through an informer and a controller with a no-op reconciler that reads
//! the cached object; prints the wall time of each round. Built against two
//! commits of tend (point `Cargo.toml`'s path at a worktree of the older
//! one), run alternated, it compares them on the same machine; under
//! `valgrind --tool=callgrind --separate-threads=yes` with one runtime
//! thread, in instructions. Build both with
//! `CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1` to compare instructions: with
//! the default 16 units, what the compiler inlines follows how the code is
//! partitioned, and an unrelated change moves a run by 1–5 %.
//!
//! `tend-ab [objects] [runtime threads] [workers] [rounds] [mode]`, mode:
//! - `list` (default): the source lists every object;
//! - `watch`: an empty list, then every object as a watch event, from a
//!   channel filled before the clock starts;
//! - `built`: an empty list, then every object as a watch event, each
//!   built by a producer thread while the clock runs; then the floor: the
//!   same producer through a channel to one task that reads and keeps each;
//! - `storm`: that many updates over 10,000 keys from a filled channel
//!   (round-robin, or a burst per key with `TEND_AB_BURSTS` set), until
//!   every key was reconciled at its last version; then the floor: the
//!   same updates read from the channel by one task.
//!
//! Only API that tend has had since `d1bd82c` is used here.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::{Change, Informer, Revision, Snapshot, Source, SourceError};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// The keys of a storm.
const KEYS: usize = 10_000;

// The realistic benches' objects, the same file.
#[path = "../../support/config_map.rs"]
mod config_map;

use config_map::{ConfigMap, config_map};

/// Lists what it was given, once; its watch never changes anything.
struct Listed(parking_lot::Mutex<Option<Vec<ConfigMap>>>);

#[async_trait::async_trait]
impl Source for Listed {
    type Object = ConfigMap;

    fn name(&self) -> &str {
        "config-maps"
    }

    async fn list(&self) -> Result<Snapshot<ConfigMap>, SourceError> {
        let objects = self.0.lock().take().unwrap_or_default();
        Ok(Snapshot {
            objects,
            revision: Revision::new(1),
        })
    }

    async fn watch(&self, _: Revision) -> Result<tend::WatchStream<ConfigMap>, SourceError> {
        Ok(Box::pin(futures::stream::pending()))
    }
}

/// An empty list, then every object of the channel as a watch event.
struct Channel(parking_lot::Mutex<Option<mpsc::UnboundedReceiver<ConfigMap>>>);

#[async_trait::async_trait]
impl Source for Channel {
    type Object = ConfigMap;

    fn name(&self) -> &str {
        "config-maps"
    }

    async fn list(&self) -> Result<Snapshot<ConfigMap>, SourceError> {
        Ok(Snapshot {
            objects: Vec::new(),
            revision: Revision::ZERO,
        })
    }

    async fn watch(&self, _: Revision) -> Result<tend::WatchStream<ConfigMap>, SourceError> {
        let rx = self.0.lock().take().expect("watched once");
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            let object = rx.recv().await?;
            Some((Ok(Change::Applied(object)), rx))
        })))
    }
}

/// Counts reconciles; done after `target` of them, or once every key in
/// `last` was reconciled at its version there.
struct Reads {
    count: AtomicUsize,
    target: usize,
    last: Vec<AtomicU64>,
    left: AtomicUsize,
    done: Notify,
}

impl Reads {
    fn new(target: usize, last: Vec<AtomicU64>) -> Arc<Self> {
        let left = AtomicUsize::new(last.len());
        Arc::new(Self {
            count: AtomicUsize::new(0),
            target,
            last,
            left,
            done: Notify::new(),
        })
    }

    fn saw(&self, object: &ConfigMap) {
        let index: usize = object.key.name["config-".len()..]
            .parse()
            .expect("an index");
        let last = &self.last[index];
        let version = object.version.get();
        if version == last.load(Ordering::Relaxed)
            && last.swap(0, Ordering::Relaxed) == version
            && self.left.fetch_sub(1, Ordering::Relaxed) == 1
        {
            self.done.notify_one();
        }
    }
}

impl Reconciler<ConfigMap> for Arc<Reads> {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        if let Some(object) = ctx.object() {
            std::hint::black_box(object.data.len());
            if !self.last.is_empty() {
                self.saw(object);
            }
        }
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if count == self.target && self.last.is_empty() {
            self.done.notify_one();
        }
        Ok(Action::Done)
    }
}

/// Runs `informer` and a controller of `workers` over it until `reads` is
/// done; the time since `start`.
async fn run(
    informer: Informer<ConfigMap>,
    reads: &Arc<Reads>,
    workers: usize,
    start: Instant,
) -> Duration {
    let controller = Controller::builder("ab", &informer, Arc::clone(reads))
        .concurrency(NonZeroUsize::new(workers).expect("workers > 0"))
        .build()
        .expect("valid");
    let stop = CancellationToken::new();
    // Dropped last, here: the cache's objects are freed on the thread that
    // runs this future, not on a runtime thread that callgrind counts.
    let cache = informer.clone();
    let watching = tokio::spawn({
        let stop = stop.clone();
        async move { informer.run(stop).await }
    });
    let running = tokio::spawn(controller.run(stop.clone()));
    tokio::time::timeout(Duration::from_secs(600), reads.done.notified())
        .await
        .expect("every object reconciled within 10 minutes");
    let took = start.elapsed();
    stop.cancel();
    running.await.expect("task").expect("controller");
    watching.await.expect("task").expect("informer");
    drop(cache);
    took
}

/// A channel holding `objects`, its sender forgotten (it never closes).
fn filled(objects: impl IntoIterator<Item = ConfigMap>) -> mpsc::UnboundedReceiver<ConfigMap> {
    let (tx, rx) = mpsc::unbounded_channel();
    for object in objects {
        tx.send(object).expect("open");
    }
    std::mem::forget(tx);
    rx
}

fn sync(runtime: &tokio::runtime::Runtime, count: usize, workers: usize, watch: bool) {
    let mut objects: Vec<ConfigMap> = (0..count).map(config_map).collect();
    let informer = if watch {
        for (n, object) in objects.iter_mut().enumerate() {
            object.version = Revision::new(n as u64 + 1);
        }
        let channel = Channel(parking_lot::Mutex::new(Some(filled(objects))));
        Informer::builder(channel).build()
    } else {
        Informer::builder(Listed(parking_lot::Mutex::new(Some(objects)))).build()
    };
    let reads = Reads::new(count, Vec::new());
    let informer = informer.expect("valid");
    let took = runtime.block_on(run(informer, &reads, workers, Instant::now()));
    println!("{:.1} ms", took.as_secs_f64() * 1e3);
}

/// The channel a producer thread builds objects into, and that thread.
struct Produced {
    rx: mpsc::UnboundedReceiver<ConfigMap>,
    /// Returns the sender, so the channel stays open (as a watch does)
    /// until the caller joins it after the clock stops.
    thread: std::thread::JoinHandle<mpsc::UnboundedSender<ConfigMap>>,
}

/// Starts a thread building `count` objects (versions 1, 2, ...) into a
/// channel.
fn producer(count: usize) -> Produced {
    let (tx, rx) = mpsc::unbounded_channel();
    let thread = std::thread::spawn(move || {
        for n in 0..count {
            let object = ConfigMap {
                version: Revision::new(n as u64 + 1),
                ..config_map(n)
            };
            if tx.send(object).is_err() {
                break;
            }
        }
        tx
    });
    Produced { rx, thread }
}

/// The floor of `built`: the producer through a channel to one task that
/// reads and keeps each object.
fn built_floor(runtime: &tokio::runtime::Runtime, count: usize) -> Duration {
    runtime.block_on(async move {
        let start = Instant::now();
        let Produced { mut rx, thread } = producer(count);
        let reading = tokio::spawn(async move {
            let mut kept = Vec::with_capacity(count);
            for _ in 0..count {
                let object = Arc::new(rx.recv().await.expect("produced"));
                std::hint::black_box(object.data.len());
                kept.push(object);
            }
            kept
        });
        let kept = reading.await.expect("task");
        let took = start.elapsed();
        drop((kept, thread.join().expect("producer")));
        took
    })
}

/// The sync with each object built while the clock runs, and its floor;
/// which runs first alternates with `round`, as the heap one leaves
/// behind moves the other. Prints both times and their ratio.
fn built(runtime: &tokio::runtime::Runtime, count: usize, workers: usize, round: usize) {
    let tend = || {
        let reads = Reads::new(count, Vec::new());
        runtime.block_on(async {
            // The clock starts before the producer, as the floor's does.
            let start = Instant::now();
            let Produced { rx, thread } = producer(count);
            let channel = Channel(parking_lot::Mutex::new(Some(rx)));
            let informer = Informer::builder(channel).build().expect("valid");
            let took = run(informer, &reads, workers, start).await;
            drop(thread.join().expect("producer"));
            took
        })
    };
    let (took, floor) = if round.is_multiple_of(2) {
        let took = tend();
        (took, built_floor(runtime, count))
    } else {
        let floor = built_floor(runtime, count);
        (tend(), floor)
    };
    let ratio = took.as_secs_f64() / floor.as_secs_f64();
    println!(
        "{:.1} ms floor {:.1} ms ratio {ratio:.2}",
        took.as_secs_f64() * 1e3,
        floor.as_secs_f64() * 1e3
    );
}

/// The key of update `n` of `count`: round-robin, or in bursts.
fn storm_key(n: usize, count: usize, bursts: bool) -> usize {
    if bursts { n / (count / KEYS) } else { n % KEYS }
}

fn storm(runtime: &tokio::runtime::Runtime, count: usize, workers: usize) {
    let bursts = std::env::var_os("TEND_AB_BURSTS").is_some();
    let templates: Vec<ConfigMap> = (0..KEYS).map(config_map).collect();
    let updates = || {
        filled((0..count).map(|n| ConfigMap {
            version: Revision::new(n as u64 + 1),
            ..templates[storm_key(n, count, bursts)].clone()
        }))
    };
    let mut last: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    for n in 0..count {
        *last[storm_key(n, count, bursts)].get_mut() = n as u64 + 1;
    }
    let reads = Reads::new(count, last);
    let channel = Channel(parking_lot::Mutex::new(Some(updates())));
    let informer = Informer::builder(channel).build().expect("valid");
    let took = runtime.block_on(run(informer, &reads, workers, Instant::now()));
    let mut rx = updates();
    // One task on the runtime, as the informer is.
    let floor = runtime.block_on(async move {
        let start = Instant::now();
        let reading = tokio::spawn(async move {
            for _ in 0..count {
                let object = Arc::new(rx.recv().await.expect("filled"));
                std::hint::black_box(object.data.len());
            }
        });
        reading.await.expect("task");
        start.elapsed()
    });
    let per_key = reads.count.load(Ordering::Relaxed) as f64 / KEYS as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = took.as_secs_f64() / floor.as_secs_f64();
    println!(
        "{:.1} ms floor {:.1} ms ratio {ratio:.2} reconciles/key {per_key:.2}",
        ms(took),
        ms(floor)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (count, threads, workers, rounds) =
        (number(1, 100_000), number(2, 2), number(3, 4), number(4, 5));
    let mode = args.get(5).map_or("list", String::as_str);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    for round in 0..rounds {
        match mode {
            "list" => sync(&runtime, count, workers, false),
            "watch" => sync(&runtime, count, workers, true),
            "built" => built(&runtime, count, workers, round),
            "storm" => storm(&runtime, count, workers),
            other => panic!("unknown mode {other}: list, watch, built or storm"),
        }
    }
}
