//! Changes as users see them: ConfigMap-like objects of about 1.7 KB keyed
//! by `ObjectKey`, fed by a custom `Source` from a channel (an empty list,
//! then every change as one watch), a no-op reconciler that reads the
//! cached object; each figure beside its floor in the same run: the same
//! objects, made by the same producer thread, through a channel to one task.
//!
//! - storm: 1M updates over 10k keys, until every key was reconciled at its
//!   last version (and how many reconciles per key that took), the updates
//!   once round-robin over the keys and once in bursts (a hundred
//!   back-to-back updates of each key);
//! - latency: 20k updates/s for 5 s over 1,000 keys, from the producer's
//!   send to the reconcile's start, p50 and p99.
//!
//! `cargo bench --bench realistic_changes`; `TEND_BENCH=storm` or
//! `latency` runs one.

#[path = "support/config_map.rs"]
mod config_map;
#[path = "support/sources.rs"]
mod sources;

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use config_map::{ConfigMap, config_map};
use parking_lot::Mutex;
use sources::{Channel, Tap, update};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::{CancellationToken, Informer, Revision};
use tokio::sync::{Notify, mpsc};

const RUNS: usize = 3;

/// Reads each object; per key, the highest version reconciled, and a
/// notice once each key was reconciled at its last version; for the
/// latency, when each version was sent and taken by the informer, and the
/// send-to-start times with their split.
struct Reads {
    reconciles: AtomicUsize,
    /// Per key index: the highest version reconciled.
    seen: Vec<AtomicU64>,
    /// Per key index: the version that ends the run.
    last: Vec<u64>,
    /// Keys not yet reconciled at their last version.
    left: AtomicUsize,
    /// Notified when `left` reaches zero: the run waits on it rather than
    /// polling, as a timer's ticks would wake the runtime's threads.
    done: Notify,
    /// Per update: nanoseconds since `epoch` when it was sent (0: not yet).
    sent: Vec<AtomicU64>,
    /// Per update: when the informer took it from the source's watch (0:
    /// not yet, or a run without the tap).
    taken: Vec<AtomicU64>,
    epoch: Instant,
    latencies: Mutex<Vec<Duration>>,
    /// Per reconcile of a sent update: the two parts of its latency.
    splits: Mutex<Vec<Split>>,
}

/// One latency split where the informer takes the change from the source.
#[derive(Clone, Copy)]
struct Split {
    /// Send → the informer takes it (what the floor measures whole).
    to_informer: Duration,
    /// The informer takes it → the reconcile starts (tend's pipeline).
    to_reconcile: Duration,
}

impl Reads {
    /// `last(key)`: the version of `key`'s last update.
    fn new(keys: usize, updates: usize, last: impl Fn(usize) -> u64) -> Arc<Self> {
        Arc::new(Self {
            reconciles: AtomicUsize::new(0),
            seen: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            last: (0..keys).map(last).collect(),
            left: AtomicUsize::new(keys),
            done: Notify::new(),
            sent: (0..updates).map(|_| AtomicU64::new(0)).collect(),
            taken: (0..updates).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            latencies: Mutex::new(Vec::with_capacity(updates)),
            splits: Mutex::new(Vec::with_capacity(updates)),
        })
    }

    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    fn sent_now(&self, n: usize) {
        self.sent[n].store(self.now(), Ordering::Relaxed);
    }

    /// Records `key` reconciled at `version`; notifies `done` once every
    /// key was reconciled at its last version.
    fn saw(&self, key: usize, version: u64) {
        let last = self.last[key];
        let before = self.seen[key].fetch_max(version, Ordering::Relaxed);
        if before < last && version >= last && self.left.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.done.notify_one();
        }
    }

    /// Splits update `n`'s latency (sent at `sent`, started at `now`) where
    /// the informer took it, if the source's tap saw it.
    fn split(&self, n: usize, sent: u64, now: u64) {
        let taken = self.taken[n].load(Ordering::Relaxed);
        if taken == 0 {
            return;
        }
        // Sent, then taken, then started: a split outside that is a bug.
        assert!(
            (sent..=now).contains(&taken),
            "update {n} taken at {taken} ns, outside {sent}..={now}"
        );
        self.splits.lock().push(Split {
            to_informer: Duration::from_nanos(taken - sent),
            to_reconcile: Duration::from_nanos(now - taken),
        });
    }

    fn taken_now(&self, object: &ConfigMap) {
        let n = (object.version.get() - 1) as usize;
        self.taken[n].store(self.now(), Ordering::Relaxed);
    }
}

impl Reconciler<ConfigMap> for Arc<Reads> {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        let Some(object) = ctx.object() else {
            return Ok(Action::Done);
        };
        let version = object.version.get();
        let n = (version - 1) as usize;
        let sent = self.sent[n].load(Ordering::Relaxed);
        if sent > 0 {
            let now = self.now().max(sent);
            self.latencies.lock().push(Duration::from_nanos(now - sent));
            self.split(n, sent, now);
        }
        self.saw(index(object), version);
        Ok(Action::Done)
    }
}

/// The index `config_map` made `object` from (its name's number).
fn index(object: &ConfigMap) -> usize {
    let digits = object
        .key
        .name
        .trim_start_matches(|c: char| !c.is_ascii_digit());
    digits
        .parse()
        .expect("a config map's name ends in its index")
}

/// How a storm's updates go over the keys.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// Key 0 to the last, then again: each key's updates far apart.
    RoundRobin,
    /// All of a key's updates back to back, then the next key's.
    Bursts,
}

impl Order {
    /// The key of update `n` of `updates` over `keys`.
    fn key(self, n: usize, keys: usize, updates: usize) -> usize {
        match self {
            Self::RoundRobin => n % keys,
            Self::Bursts => n / (updates / keys),
        }
    }

    /// The version of `key`'s last update.
    fn last(self, key: usize, keys: usize, updates: usize) -> u64 {
        let n = match self {
            Self::RoundRobin => updates - keys + key,
            Self::Bursts => (key + 1) * (updates / keys) - 1,
        };
        n as u64 + 1
    }
}

/// Runs a controller over a channel source (with `tap` on its watch) while
/// `produce` sends into it from a thread of its own; returns once every key
/// was reconciled at its last version, and the time.
fn controlled(
    runtime: &tokio::runtime::Runtime,
    reads: &Arc<Reads>,
    produce: impl FnOnce(mpsc::UnboundedSender<ConfigMap>) + Send + 'static,
    tap: Option<Tap>,
) -> Duration {
    runtime.block_on(async {
        let (tx, rx) = mpsc::unbounded_channel();
        let source = Channel::tapped(rx, tap);
        let informer = Informer::builder(source).build().expect("valid");
        let controller = Controller::builder("changes", &informer, Arc::clone(reads))
            .concurrency(NonZeroUsize::new(4).expect("non-zero"))
            .build()
            .expect("valid");
        let stop = CancellationToken::new();
        let watching = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        let running = tokio::spawn(controller.run(stop.clone()));
        informer
            .wait_synced(Duration::from_secs(60))
            .await
            .expect("synced");
        let start = Instant::now();
        let producer = std::thread::spawn(move || produce(tx));
        tokio::time::timeout(Duration::from_secs(300), reads.done.notified())
            .await
            .expect("every key reconciled at its last version within 5 minutes");
        let took = start.elapsed();
        producer.join().expect("producer");
        stop.cancel();
        running.await.expect("task").expect("controller");
        watching.await.expect("task").expect("informer");
        took
    })
}

/// The floor: what `produce` sends, through a channel to one task that
/// reads each object; the time until it has them all.
fn floor(
    runtime: &tokio::runtime::Runtime,
    reads: &Arc<Reads>,
    produce: impl FnOnce(mpsc::UnboundedSender<ConfigMap>) + Send + 'static,
) -> Duration {
    runtime.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel::<ConfigMap>();
        let reads = Arc::clone(reads);
        let start = Instant::now();
        let consumer = tokio::spawn(async move {
            while let Some(object) = rx.recv().await {
                let object = Arc::new(object);
                let n = (object.version.get() - 1) as usize;
                let sent = reads.sent[n].load(Ordering::Relaxed);
                if sent > 0 {
                    let now = reads.epoch.elapsed().as_nanos() as u64;
                    reads
                        .latencies
                        .lock()
                        .push(Duration::from_nanos(now.saturating_sub(sent)));
                }
                std::hint::black_box(object.data.len());
            }
        });
        let producer = std::thread::spawn(move || produce(tx));
        consumer.await.expect("consumer");
        producer.join().expect("producer");
        start.elapsed()
    })
}

fn storm(runtime: &tokio::runtime::Runtime, order: Order) {
    const KEYS: usize = 10_000;
    const UPDATES: usize = 1_000_000;
    let templates: Vec<ConfigMap> = (0..KEYS).map(config_map).collect();
    // Built before the clock starts: the figure is the pipeline's, not
    // the producer's cloning of 1.7 KB objects.
    let updates = || -> Vec<ConfigMap> {
        let update = |n| ConfigMap {
            version: Revision::new(n as u64 + 1),
            ..templates[order.key(n, KEYS, UPDATES)].clone()
        };
        (0..UPDATES).map(update).collect()
    };
    let produce = |updates: Vec<ConfigMap>| {
        move |tx: mpsc::UnboundedSender<ConfigMap>| {
            for object in updates {
                tx.send(object).expect("open");
            }
        }
    };
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let last = |key: usize| order.last(key, KEYS, UPDATES);
        let reads = Reads::new(KEYS, UPDATES, last);
        // No tap: the storm's informer does only tend's work.
        let took = controlled(runtime, &reads, produce(updates()), None);
        let per_key = reads.reconciles.load(Ordering::Relaxed) as f64 / KEYS as f64;
        let base = floor(
            runtime,
            &Reads::new(KEYS, UPDATES, last),
            produce(updates()),
        );
        runs.push((took, base, per_key));
    }
    runs.sort_by(|a, b| {
        (a.0.as_secs_f64() / a.1.as_secs_f64()).total_cmp(&(b.0.as_secs_f64() / b.1.as_secs_f64()))
    });
    let (took, base, per_key) = runs[RUNS / 2];
    println!(
        "update storm ({order:?}), 1M updates of ConfigMap-like objects over 10k ObjectKey keys: {:.3} s, {per_key:.2} reconciles per key; floor {:.3} s; ratio {:.2}",
        took.as_secs_f64(),
        base.as_secs_f64(),
        took.as_secs_f64() / base.as_secs_f64(),
    );
}

/// Sends update `n` of `templates` every 50 µs (20k/s) for `count`
/// updates, recording when each was sent; sleeps between sends.
fn paced(
    templates: Arc<Vec<ConfigMap>>,
    reads: Arc<Reads>,
    count: usize,
) -> impl FnOnce(mpsc::UnboundedSender<ConfigMap>) + Send + 'static {
    move |tx| {
        let start = Instant::now();
        for n in 0..count {
            let due = start + Duration::from_micros(50) * u32::try_from(n).expect("fits");
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let object = update(&templates, n);
            reads.sent_now(n);
            tx.send(object).expect("open");
        }
    }
}

/// The p50 and p99 of `latencies` (sorted in place).
fn p50_p99(latencies: &mut [Duration]) -> (Duration, Duration) {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64) * q) as usize];
    (at(0.50), at(0.99))
}

fn percentiles(latencies: &Mutex<Vec<Duration>>) -> (Duration, Duration) {
    p50_p99(&mut latencies.lock().clone())
}

/// Where the slowest reconciles' time went: p50 and p99 of each part, and
/// of the slowest 1 % (by the whole latency), the share of tend's part.
fn split_report(splits: &Mutex<Vec<Split>>) -> String {
    let mut splits = splits.lock().clone();
    assert!(!splits.is_empty(), "the latency run split no latency");
    let part = |f: fn(&Split) -> Duration| p50_p99(&mut splits.iter().map(f).collect::<Vec<_>>());
    let (i50, i99) = part(|s| s.to_informer);
    let (r50, r99) = part(|s| s.to_reconcile);
    splits.sort_unstable_by_key(|s| s.to_informer + s.to_reconcile);
    let slowest = &splits[splits.len() * 99 / 100..];
    let pipeline: Duration = slowest.iter().map(|s| s.to_reconcile).sum();
    let whole: Duration = slowest.iter().map(|s| s.to_informer + s.to_reconcile).sum();
    format!(
        "send → informer p50 {i50:.2?}, p99 {i99:.2?}; informer → reconcile start p50 {r50:.2?}, p99 {r99:.2?}; of the slowest 1 %, {:.0} % in informer → reconcile",
        100.0 * pipeline.as_secs_f64() / whole.as_secs_f64()
    )
}

/// One run of the latency figure, tend then its floor; prints both.
fn latency(runtime: &tokio::runtime::Runtime) {
    const KEYS: usize = 1_000;
    const UPDATES: usize = 100_000;
    let templates: Arc<Vec<ConfigMap>> = Arc::new((0..KEYS).map(config_map).collect());
    let last = |key: usize| (UPDATES - KEYS + key + 1) as u64;
    let reads = Reads::new(KEYS, UPDATES, last);
    let tapped = Arc::clone(&reads);
    let tap: Tap = Arc::new(move |object| tapped.taken_now(object));
    let produce = paced(Arc::clone(&templates), Arc::clone(&reads), UPDATES);
    controlled(runtime, &reads, produce, Some(tap));
    let (p50, p99) = percentiles(&reads.latencies);
    let base = Reads::new(KEYS, UPDATES, last);
    floor(runtime, &base, paced(templates, Arc::clone(&base), UPDATES));
    let (f50, f99) = percentiles(&base.latencies);
    println!(
        "latency at 20k updates/s for 5 s, ConfigMap-like objects over 1,000 ObjectKey keys (send → reconcile start): p50 {p50:.2?}, p99 {p99:.2?}; floor (send → receive) p50 {f50:.2?}, p99 {f99:.2?}; ratios {:.2} / {:.2}",
        p50.as_secs_f64() / f50.as_secs_f64(),
        p99.as_secs_f64() / f99.as_secs_f64(),
    );
    println!("  {}", split_report(&reads.splits));
}

fn selected(name: &str) -> bool {
    std::env::var("TEND_BENCH").map_or(true, |only| only == name)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    if selected("storm") {
        storm(&runtime, Order::RoundRobin);
        storm(&runtime, Order::Bursts);
    }
    if selected("latency") {
        // The tail moves with the machine between 5-second windows.
        for _ in 0..RUNS {
            latency(&runtime);
        }
    }
}
