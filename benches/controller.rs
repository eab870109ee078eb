//! Controller benchmarks with a no-op reconciler on the memory backend, each
//! beside a baseline measured in the same run: the same objects pushed
//! through a tokio mpsc to a single task. Run with
//! `cargo bench --bench controller`; it prints one line per figure.

#[path = "support/noop.rs"]
mod noop;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use noop::{
    Item, NoOp, STORM_KEYS, STORM_UPDATES, SYNC_OBJECTS, Setup, item, run_until, runtime,
    storm_run, sync_run,
};
use tend::controller::Controller;
use tend::memory::MemoryStore;
use tend::{Informer, Revision};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The baseline: the same objects through an mpsc to one task.
fn mpsc_baseline(runtime: &Runtime, objects: Vec<Item>) -> Duration {
    runtime.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        let consumer = tokio::spawn(async move {
            let mut seen = 0usize;
            while let Some(item) = rx.recv().await {
                std::hint::black_box::<&Arc<Item>>(&item);
                seen += 1;
            }
            seen
        });
        for object in objects {
            tx.send(Arc::new(object)).expect("open");
        }
        drop(tx);
        consumer.await.expect("consumer");
        start.elapsed()
    })
}

/// Whether to run figure `name`: all, unless `TEND_BENCH` names one
/// (`sync`, `storm`, `bursts`, `latency`), for profiling.
fn selected(name: &str) -> bool {
    std::env::var("TEND_BENCH").map_or(true, |only| only == name)
}

fn main() {
    if selected("sync") {
        initial_sync();
    }
    if selected("storm") {
        update_storm();
    }
    if selected("bursts") {
        bursts();
    }
    if selected("latency") {
        latency();
    }
}

/// Runs the timed figures this many times, each beside its own baseline,
/// and reports the run with the median ratio: one run on a shared machine
/// can be an outlier either way.
const RUNS: usize = 5;

/// One run of a timed figure: its time, the baseline's, and what it reports.
struct Run {
    took: Duration,
    base: Duration,
    line: String,
}

impl Run {
    fn ratio(&self) -> f64 {
        self.took.as_secs_f64() / self.base.as_secs_f64()
    }
}

/// Prints the median run of `RUNS`, with the spread of the ratios.
fn median_of(mut run: impl FnMut() -> Run) {
    let mut runs: Vec<Run> = (0..RUNS).map(|_| run()).collect();
    runs.sort_by(|a, b| a.ratio().total_cmp(&b.ratio()));
    let (low, high) = (runs[0].ratio(), runs[RUNS - 1].ratio());
    let median = &runs[RUNS / 2];
    println!(
        "{}; ratio {:.2} (median of {RUNS}, {low:.2}–{high:.2})",
        median.line,
        median.ratio()
    );
}

fn initial_sync() {
    median_of(initial_sync_once);
}

fn initial_sync_once() -> Run {
    let runtime = runtime();
    // 1. Initial sync of 100k objects until every key reconciled once.
    let took = sync_run(&runtime, None);
    let base = mpsc_baseline(&runtime, (0..SYNC_OBJECTS).map(|id| item(id, 1)).collect());
    Run {
        took,
        base,
        line: format!(
            "initial sync, 100k objects: {took:.2?} ({:.0} objects/s); mpsc baseline {base:.2?}",
            SYNC_OBJECTS as f64 / took.as_secs_f64(),
        ),
    }
}

fn update_storm() {
    median_of(update_storm_once);
}

fn update_storm_once() -> Run {
    let runtime = runtime();
    // 2. Update storm: 1M updates over 10k keys, until every key reconciled
    //    at its final version.
    let (took, reconciles) = storm_run(&runtime, None);
    let base = mpsc_baseline(
        &runtime,
        (0..STORM_UPDATES)
            .map(|n| item(n % STORM_KEYS, n / STORM_KEYS + 1))
            .collect(),
    );
    Run {
        took,
        base,
        line: format!(
            "update storm, 1M updates over 10k keys: {took:.2?}, {reconciles} reconciles ({:.2} per key, {:.3} per key per pass); mpsc baseline {base:.2?}",
            reconciles as f64 / STORM_KEYS as f64,
            reconciles as f64 / STORM_UPDATES as f64,
        ),
    }
}

/// A source over a channel, as a user would write one: an empty list, then
/// every object sent, as one watch.
struct Channel(Mutex<Option<mpsc::UnboundedReceiver<Item>>>);

#[tend::async_trait]
impl tend::Source for Channel {
    type Object = Item;

    fn name(&self) -> &str {
        "channel"
    }

    async fn list(&self) -> Result<tend::Snapshot<Item>, tend::SourceError> {
        Ok(tend::Snapshot {
            objects: Vec::new(),
            revision: Revision::ZERO,
        })
    }

    async fn watch(&self, _from: Revision) -> Result<tend::WatchStream<Item>, tend::SourceError> {
        let rx = self.0.lock().expect("not poisoned").take();
        let rx = rx.ok_or_else(|| tend::SourceError::unavailable("watched once"))?;
        let changes = futures::stream::unfold(rx, |mut rx| async move {
            let item = rx.recv().await?;
            Some((Ok(tend::Change::Applied(item)), rx))
        });
        Ok(Box::pin(changes))
    }
}

fn bursts() {
    median_of(bursts_once);
}

/// Bursts: 100 back-to-back updates to each of 10k keys, one key after the
/// other, pushed through a channel source as fast as a thread can; until
/// every key reconciled at its final version. The figure that matters is
/// reconciles per key (1.00: one per burst).
fn bursts_once() -> Run {
    const KEYS: u64 = 10_000;
    const PER_KEY: u64 = 100;
    let runtime = runtime();
    let (tx, rx) = mpsc::unbounded_channel();
    let reconciler = Arc::new(NoOp {
        target: PER_KEY,
        reached: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        ..NoOp::default()
    });
    let burst = |n: u64| Item {
        version: Revision::new(n + 1),
        ..item(n / PER_KEY, n % PER_KEY + 1)
    };
    let took = runtime.block_on(async {
        let source = Channel(Mutex::new(Some(rx)));
        let informer = Informer::builder(source).build().expect("valid");
        let controller = Controller::builder("bursts", &informer, Arc::clone(&reconciler))
            .concurrency(NonZeroUsize::new(4).expect("non-zero"))
            .build()
            .expect("valid");
        let stop = CancellationToken::new();
        let informer_task = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        let run = tokio::spawn(controller.run(stop.clone()));
        informer
            .wait_synced(Duration::from_secs(60))
            .await
            .expect("synced");
        let start = Instant::now();
        std::thread::spawn(move || {
            for n in 0..KEYS * PER_KEY {
                tx.send(burst(n)).expect("open");
            }
        });
        while reconciler.done.load(Ordering::Relaxed) < KEYS as usize {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let took = start.elapsed();
        stop.cancel();
        run.await.expect("task").expect("controller");
        informer_task.await.expect("task").expect("informer");
        took
    });
    let reconciles = reconciler.reconciles.load(Ordering::Relaxed);
    let base = mpsc_baseline(&runtime, (0..KEYS * PER_KEY).map(burst).collect());
    Run {
        took,
        base,
        line: format!(
            "bursts, 100 back-to-back updates to each of 10k keys through a channel source: {took:.2?}, {reconciles} reconciles ({:.3} per key); mpsc baseline {base:.2?}",
            reconciles as f64 / KEYS as f64,
        ),
    }
}

/// Calls `write(n)` for n in 0..count, one every `every`, from the calling
/// thread. It sleeps between writes rather than spinning, so the runtime's
/// threads have the cores to themselves as on an idle machine; a late write
/// (sleeps overshoot) is made at once.
fn paced(count: u64, every: Duration, mut write: impl FnMut(u64)) {
    let start = Instant::now();
    for n in 0..count {
        let due = start + every * u32::try_from(n).expect("fits");
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        write(n);
    }
}

const LATENCY_WRITES: u64 = 100_000;
const LATENCY_MEASURED: usize = 50_000;
const LATENCY_EVERY: Duration = Duration::from_micros(50);

fn percentiles(mut latencies: Vec<Duration>) -> (Duration, Duration) {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64) * q) as usize];
    (at(0.50), at(0.99))
}

fn latency() {
    let runtime = runtime();
    let [(p50, p99), (own50, own99)] = latency_once(&runtime, true);
    let [(off50, off99), _] = latency_once(&runtime, false);
    let (base50, base99) = latency_baseline(&runtime);
    println!(
        "latency at 20k updates/s for 5 s (write → reconcile start): p50 {p50:.2?}, p99 {p99:.2?}; the controller's own reconcile_latency (change reaching it → start): p50 {own50:.2?}, p99 {own99:.2?}; read-your-writes off: p50 {off50:.2?} ({:+.1} %), p99 {off99:.2?}; mpsc baseline (send → receive) p50 {base50:.2?}, p99 {base99:.2?}",
        (p50.as_secs_f64() / off50.as_secs_f64() - 1.0) * 100.0,
    );
}

/// 3. Latency: 20k updates/s for 5 s, backend write → reconcile start, of a
///    reconciler that does not write (with read-your-writes on or off):
///    the bench's percentiles, then the controller's own.
fn latency_once(runtime: &Runtime, read_your_writes: bool) -> [(Duration, Duration); 2] {
    let store = MemoryStore::new("latency");
    for id in 0..1_000 {
        store.put(item(id, 0));
    }
    let reconciler = Arc::new(NoOp {
        target: u64::MAX,
        ..NoOp::default()
    });
    let writer = store.clone();
    let gate = read_your_writes.then_some(Duration::from_secs(10));
    run_until(
        runtime,
        Setup::new(&store, gate),
        &reconciler,
        move || {
            std::thread::spawn(move || {
                paced(LATENCY_WRITES, LATENCY_EVERY, |n| {
                    writer.put(item(n % 1_000, n + 1));
                });
            });
        },
        |r| r.latencies.lock().expect("not poisoned").len() >= LATENCY_MEASURED,
    );
    let latencies = reconciler.latencies.lock().expect("not poisoned").clone();
    let measured = reconciler.measured.lock().expect("not poisoned").clone();
    [percentiles(latencies), percentiles(measured)]
}

/// The wake-up floor of this machine: the same paced writer sending the
/// write time through an mpsc to a task on the same runtime.
fn latency_baseline(runtime: &Runtime) -> (Duration, Duration) {
    runtime.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
        let receiver = tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(LATENCY_MEASURED);
            while let Some(sent) = rx.recv().await {
                if latencies.len() < LATENCY_MEASURED {
                    latencies.push(sent.elapsed());
                }
            }
            latencies
        });
        std::thread::spawn(move || {
            paced(LATENCY_WRITES / 2, LATENCY_EVERY, |_| {
                tx.send(Instant::now()).expect("open");
            });
        });
        percentiles(receiver.await.expect("receiver"))
    })
}
