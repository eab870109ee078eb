//! The initial sync as users run it: ConfigMap-like objects of about
//! 1.7 KB (labels, annotations, data), keyed by namespace/name
//! (`ObjectKey`), listed by a custom `Source`, a no-op reconciler that
//! reads the cached object; 10k, 100k and 1M objects. Each size beside its
//! floor measured in the same run: the same objects through a channel to
//! one task. Also the heap the controller holds beyond the objects, per
//! object, once synced (and the peak while syncing).
//!
//! `cargo bench --bench realistic` prints one line per size (medians of
//! three) and writes `target/realistic.csv` (size, seconds, floor, heap).
//! With `TEND_UNLENT` set, the same objects implement `Object` by hand
//! without lending their key (as a Kubernetes object, whose key is built
//! from its metadata), so the cache keeps a copy of each key; that run
//! writes `target/realistic-unlent.csv`.

use std::alloc::System;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "support/config_map.rs"]
mod config_map;
#[path = "support/sources.rs"]
mod sources;

use config_map::{ConfigMap, config_map};
use sources::Listed;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::{CancellationToken, Informer, Object, ObjectKey, Revision};
use tokio::sync::mpsc;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const RUNS: usize = 3;

/// Reads each reconciled object; counts the keys reconciled.
#[derive(Clone, Default)]
struct Reads(Arc<AtomicUsize>);

/// An object the reconciler reads.
trait Read: Object {
    fn read(&self) -> usize;
}

impl Read for ConfigMap {
    fn read(&self) -> usize {
        self.data.len()
    }
}

/// The same object, implemented by hand without lending its key.
#[derive(Debug, Clone)]
struct Unlent(ConfigMap);

impl Object for Unlent {
    type Key = ObjectKey;

    fn key(&self) -> ObjectKey {
        self.0.key.clone()
    }

    fn version(&self) -> Revision {
        self.0.version
    }

    fn set_version(&mut self, version: Revision) {
        self.0.version = version;
    }
}

impl Read for Unlent {
    fn read(&self) -> usize {
        self.0.data.len()
    }
}

impl<O: Read> Reconciler<O> for Reads {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<O>) -> Result<Action, Infallible> {
        if let Some(object) = ctx.object() {
            std::hint::black_box(object.read());
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Action::Done)
    }
}

/// What one run measured.
struct Measured {
    took: Duration,
    floor: Duration,
    /// Bytes held once synced beyond the objects, per object.
    settled: f64,
    /// Bytes at most held while syncing beyond the objects, per object.
    peak: f64,
}

/// Live heap bytes since `region` began.
fn live(region: &Region<'_, System>) -> isize {
    let stats = region.change();
    // A realloc's growth or shrink is in `bytes_allocated` or
    // `bytes_deallocated` already; `bytes_reallocated` repeats it.
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

fn sync_once<O: Read>(
    runtime: &tokio::runtime::Runtime,
    count: usize,
    make: fn(usize) -> O,
) -> Measured {
    let region = Region::new(GLOBAL);
    let objects: Vec<O> = (0..count).map(make).collect();
    let of_objects = live(&region);
    let (took, peak, settled) = runtime.block_on(async {
        let source: Listed<O> = Listed(parking_lot::Mutex::new(Some(objects)));
        let informer = Informer::builder(source).build().expect("valid");
        let reads = Reads::default();
        let controller = Controller::builder("sync", &informer, reads.clone())
            .concurrency(NonZeroUsize::new(4).expect("non-zero"))
            .build()
            .expect("valid");
        let stop = CancellationToken::new();
        let start = Instant::now();
        let watching = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        let running = tokio::spawn(controller.run(stop.clone()));
        let mut peak = 0;
        while reads.0.load(Ordering::Relaxed) < count {
            peak = peak.max(live(&region));
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let took = start.elapsed();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let settled = live(&region);
        stop.cancel();
        running.await.expect("task").expect("controller");
        watching.await.expect("task").expect("informer");
        (took, peak.max(settled), settled)
    });
    let per = |bytes: isize| (bytes - of_objects) as f64 / count as f64;
    let floor = floor(runtime, count);
    Measured {
        took,
        floor,
        settled: per(settled),
        peak: per(peak),
    }
}

/// The same objects through a channel to one task that reads each and
/// keeps it (as a cache would: nothing is freed while timed).
fn floor(runtime: &tokio::runtime::Runtime, count: usize) -> Duration {
    let objects: Vec<ConfigMap> = (0..count).map(config_map).collect();
    let (took, kept) = runtime.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        let consumer = tokio::spawn(async move {
            let mut kept = Vec::with_capacity(count);
            while let Some(object) = rx.recv().await {
                let object: Arc<ConfigMap> = object;
                std::hint::black_box(object.data.len());
                kept.push(object);
            }
            kept
        });
        for object in objects {
            tx.send(Arc::new(object)).expect("open");
        }
        drop(tx);
        let kept = consumer.await.expect("consumer");
        (start.elapsed(), kept)
    });
    drop(kept);
    took
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let sizes: Vec<usize> = std::env::var("TEND_SIZES").map_or_else(
        |_| vec![10_000, 100_000, 1_000_000],
        |sizes| sizes.split(',').filter_map(|s| s.parse().ok()).collect(),
    );
    let unlent = std::env::var_os("TEND_UNLENT").is_some();
    let mut csv = String::from("objects,seconds,floor_seconds,settled_bytes,peak_bytes\n");
    for count in sizes {
        let mut runs: Vec<Measured> = (0..RUNS)
            .map(|_| {
                if unlent {
                    sync_once(&runtime, count, |i| Unlent(config_map(i)))
                } else {
                    sync_once(&runtime, count, config_map)
                }
            })
            .collect();
        runs.sort_by(|a, b| {
            let ratio = |m: &Measured| m.took.as_secs_f64() / m.floor.as_secs_f64();
            ratio(a).total_cmp(&ratio(b))
        });
        let m = &runs[RUNS / 2];
        let ratio = m.took.as_secs_f64() / m.floor.as_secs_f64();
        println!(
            "initial sync, {count} ConfigMap-like objects, ObjectKey keys{}: {:.3} s ({:.2} µs per object); floor {:.3} s; ratio {ratio:.2}; heap beyond the objects per object: {:.0} B settled, {:.0} B peak",
            if unlent { " (not lent)" } else { "" },
            m.took.as_secs_f64(),
            m.took.as_secs_f64() * 1e6 / count as f64,
            m.floor.as_secs_f64(),
            m.settled,
            m.peak,
        );
        csv.push_str(&format!(
            "{count},{:.6},{:.6},{:.1},{:.1}\n",
            m.took.as_secs_f64(),
            m.floor.as_secs_f64(),
            m.settled,
            m.peak
        ));
    }
    let file = if unlent {
        "target/realistic-unlent.csv"
    } else {
        "target/realistic.csv"
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    if let Err(error) = std::fs::write(&path, csv) {
        eprintln!("writing {}: {error}", path.display());
    }
}
