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
use sources::{Channel, update};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::{CancellationToken, Informer, Revision};
use tokio::sync::mpsc;

const RUNS: usize = 3;

/// Reads each object; per key, the highest version reconciled; when each
/// version was sent (latency), and the send-to-start times.
struct Reads {
    reconciles: AtomicUsize,
    /// Per key index: the highest version reconciled.
    seen: Vec<AtomicU64>,
    /// Per update: nanoseconds since `epoch` when it was sent (0: not yet).
    sent: Vec<AtomicU64>,
    epoch: Instant,
    latencies: Mutex<Vec<Duration>>,
}

impl Reads {
    fn new(keys: usize, updates: usize) -> Arc<Self> {
        Arc::new(Self {
            reconciles: AtomicUsize::new(0),
            seen: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            sent: (0..updates).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            latencies: Mutex::new(Vec::with_capacity(updates)),
        })
    }

    fn sent_now(&self, n: usize) {
        let nanos = self.epoch.elapsed().as_nanos() as u64;
        self.sent[n].store(nanos.max(1), Ordering::Relaxed);
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
            let now = self.epoch.elapsed().as_nanos() as u64;
            let waited = Duration::from_nanos(now.saturating_sub(sent));
            self.latencies.lock().push(waited);
        }
        self.seen[index(object)].fetch_max(version, Ordering::Relaxed);
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

/// Runs a controller over a channel source while `produce` sends into it
/// from a thread of its own; returns when `done` holds, and the time.
fn controlled(
    runtime: &tokio::runtime::Runtime,
    reads: &Arc<Reads>,
    produce: impl FnOnce(mpsc::UnboundedSender<ConfigMap>) + Send + 'static,
    done: impl Fn(&Reads) -> bool,
) -> Duration {
    runtime.block_on(async {
        let (tx, rx) = mpsc::unbounded_channel();
        let informer = Informer::builder(Channel(Mutex::new(Some(rx))))
            .build()
            .expect("valid");
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
        while !done(reads) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
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
        let reads = Reads::new(KEYS, UPDATES);
        let last = |key: usize| order.last(key, KEYS, UPDATES);
        let took = controlled(runtime, &reads, produce(updates()), |r| {
            (0..KEYS).all(|key| r.seen[key].load(Ordering::Relaxed) >= last(key))
        });
        let per_key = reads.reconciles.load(Ordering::Relaxed) as f64 / KEYS as f64;
        let base = floor(runtime, &Reads::new(KEYS, UPDATES), produce(updates()));
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

fn percentiles(latencies: &Mutex<Vec<Duration>>) -> (Duration, Duration) {
    let mut latencies = latencies.lock().clone();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64) * q) as usize];
    (at(0.50), at(0.99))
}

fn latency(runtime: &tokio::runtime::Runtime) {
    const KEYS: usize = 1_000;
    const UPDATES: usize = 100_000;
    let templates: Arc<Vec<ConfigMap>> = Arc::new((0..KEYS).map(config_map).collect());
    let reads = Reads::new(KEYS, UPDATES);
    let last = |key: usize| (UPDATES - KEYS + key + 1) as u64;
    controlled(
        runtime,
        &reads,
        paced(Arc::clone(&templates), Arc::clone(&reads), UPDATES),
        |r| (0..KEYS).all(|key| r.seen[key].load(Ordering::Relaxed) >= last(key)),
    );
    let (p50, p99) = percentiles(&reads.latencies);
    let base = Reads::new(KEYS, UPDATES);
    floor(runtime, &base, paced(templates, Arc::clone(&base), UPDATES));
    let (f50, f99) = percentiles(&base.latencies);
    println!(
        "latency at 20k updates/s for 5 s, ConfigMap-like objects over 1,000 ObjectKey keys (send → reconcile start): p50 {p50:.2?}, p99 {p99:.2?}; floor (send → receive) p50 {f50:.2?}, p99 {f99:.2?}; ratios {:.2} / {:.2}",
        p50.as_secs_f64() / f50.as_secs_f64(),
        p99.as_secs_f64() / f99.as_secs_f64(),
    );
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
        latency(&runtime);
    }
}
