//! What tracked reads cost in memory: the heap a controller's records of
//! reads hold per edge (a reading key, one distinct read), measured with a
//! counting allocator (bytes requested, not the allocator's own overhead),
//! and given back once the reads stop. Its own test binary: the allocator
//! counts the whole process.

use std::alloc::System;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Readers, and distinct keys each reads (absent keys: a miss is recorded
/// too), each read by one reader: no sharing lowers the figure.
const READERS: usize = 2_000;
const READS: usize = 8;
/// The figure the docs state (README, `ControllerBuilder::reads`), with
/// its margin: keys of 11 and 12 bytes.
const STATED: f64 = 400.0;

#[derive(Debug, Clone)]
struct Reader {
    name: String,
    version: Revision,
}

#[derive(Debug, Clone)]
struct Pod {
    name: String,
    version: Revision,
}

tend::impl_object!(Reader, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);

/// Reads `reads` pods by key, named after the reader.
struct ByKey {
    reads: Arc<AtomicUsize>,
}

impl Reconciler<Reader> for ByKey {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Reader>) -> Result<Action, Infallible> {
        let pods = ctx.cache::<Pod>().expect("reads pods");
        let number = ctx.key().trim_start_matches("reader-");
        for read in 0..self.reads.load(Ordering::SeqCst) {
            let _ = pods.get(&format!("pod-{number}-{read}"));
        }
        Ok(Action::Done)
    }
}

/// The bytes held: stats_alloc counts a realloc's growth in
/// `bytes_allocated` already (adding `bytes_reallocated` counts it twice).
fn heap() -> isize {
    let stats = GLOBAL.stats();
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

#[tokio::test(start_paused = true)]
async fn a_tracked_edge_costs_about_the_stated_bytes_and_is_freed_when_no_longer_read() {
    let readers = MemoryStore::new("readers");
    for n in 0..READERS {
        let name = format!("reader-{n:05}");
        readers.put(Reader {
            name,
            version: Revision::ZERO,
        });
    }
    let reader_informer = Informer::builder(readers).build().unwrap();
    let pod_informer = Informer::builder(MemoryStore::<Pod>::new("pods"))
        .build()
        .unwrap();
    let reads = Arc::new(AtomicUsize::new(0));
    let (signal, signals) = futures::channel::mpsc::unbounded::<()>();
    let reconciler = ByKey {
        reads: Arc::clone(&reads),
    };
    let controller = Controller::builder("by-key", &reader_informer, reconciler)
        .reads(&pod_informer)
        .reconcile_all_on(signals)
        .build()
        .unwrap();
    let mut harness = Harness::new();
    harness.informer(&reader_informer);
    harness.informer(&pod_informer);
    harness.controller(controller);
    let mut all_once = async |n: usize| {
        reads.store(n, Ordering::SeqCst);
        signal.unbounded_send(()).unwrap();
        harness.settle(Duration::from_secs(600)).await.unwrap();
        heap()
    };
    all_once(0).await; // warm: the queue, the journal, the first run
    let without = all_once(0).await;
    let with = all_once(READS).await;
    let after = all_once(0).await;
    let per_edge = (with - without) as f64 / (READERS * READS) as f64;
    println!("{per_edge:.0} bytes per tracked edge ({READERS} readers × {READS} reads by key)");
    assert!(
        per_edge <= STATED * 1.1,
        "{per_edge:.0} bytes per edge, the docs state about {STATED}"
    );
    let left = after - without;
    assert!(
        left.unsigned_abs() < READERS * READS,
        "{left} bytes left once nothing is read (under a byte per edge expected)"
    );
    harness.shutdown().await.unwrap();
}
