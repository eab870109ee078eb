//! The controller benches' harness: small objects, a no-op reconciler
//! that counts and times, and a run of a controller until a condition.

#![allow(dead_code)] // each bench uses part of it

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tend::controller::{
    Action, Context, Controller, ControllerObserver, Reconciler, Trigger, Triggers,
};
use tend::memory::MemoryStore;
use tend::{Informer, Revision};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) id: u64,
    pub(crate) value: u64,
    pub(crate) written: Instant,
    pub(crate) version: Revision,
}

tend::impl_object!(Item, key: id: u64, version: version);

/// The benches' runtime: two worker threads, like the machine's cores.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime")
}

pub(crate) fn item(id: u64, value: u64) -> Item {
    Item {
        id,
        value,
        written: Instant::now(),
        version: Revision::ZERO,
    }
}

/// Counts reconciles and remembers the keys that reached a target value.
#[derive(Debug, Default)]
pub(crate) struct NoOp {
    pub(crate) reconciles: AtomicUsize,
    /// Per key: reached the target; and how many keys have.
    pub(crate) reached: Vec<AtomicBool>,
    pub(crate) done: AtomicUsize,
    pub(crate) target: u64,
    pub(crate) latencies: Mutex<Vec<Duration>>,
    /// What the controller itself measured (`reconcile_latency`) of the
    /// changed keys, beside the bench's own `latencies`.
    pub(crate) measured: Mutex<Vec<Duration>>,
}

impl ControllerObserver for NoOp {
    fn reconcile_latency(&self, triggers: Triggers, latency: Duration) {
        // The latency figure's changes only (its target is `u64::MAX`).
        if self.target == u64::MAX && triggers.contains(Trigger::Changed) {
            self.measured.lock().expect("not poisoned").push(latency);
        }
    }
}

impl Reconciler<Item> for Arc<NoOp> {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Infallible> {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if let Some(item) = ctx.object() {
            // Value 0: the initial objects, written before the run; their
            // reconciles are the initial sync's, not the paced writes'.
            if self.target == u64::MAX && item.value > 0 {
                self.latencies
                    .lock()
                    .expect("not poisoned")
                    .push(item.written.elapsed());
            } else if item.value >= self.target
                && !self.reached[item.id as usize].swap(true, Ordering::Relaxed)
            {
                self.done.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Action::Done)
    }
}

/// What a run's controller reads, and how it is set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'a> {
    pub(crate) store: &'a MemoryStore<Item>,
    pub(crate) read_your_writes: Option<Duration>,
    /// Keys served fairly across this many groups (`id % groups`).
    pub(crate) groups: Option<u64>,
}

impl<'a> Setup<'a> {
    pub(crate) fn new(store: &'a MemoryStore<Item>, read_your_writes: Option<Duration>) -> Self {
        Self {
            store,
            read_your_writes,
            groups: None,
        }
    }
}

/// Runs a controller as `setup` says until `finished` holds; returns the
/// time.
pub(crate) fn run_until(
    runtime: &Runtime,
    setup: Setup<'_>,
    reconciler: &Arc<NoOp>,
    write: impl FnOnce(),
    finished: impl Fn(&NoOp) -> bool,
) -> Duration {
    runtime.block_on(async {
        let informer = Informer::builder(setup.store.clone())
            .build()
            .expect("valid");
        let mut builder = Controller::builder("bench", &informer, Arc::clone(reconciler))
            .concurrency(NonZeroUsize::new(4).expect("non-zero"))
            .read_your_writes(setup.read_your_writes)
            .observer(Arc::clone(reconciler) as Arc<dyn ControllerObserver>);
        if let Some(groups) = setup.groups {
            builder = builder.group_by(move |id: &u64| id % groups);
        }
        let controller = builder.build().expect("valid");
        let stop = CancellationToken::new();
        let start = Instant::now();
        let informer_task = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        let run = tokio::spawn(controller.run(stop.clone()));
        write();
        while !finished(reconciler) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let took = start.elapsed();
        stop.cancel();
        run.await.expect("task").expect("controller");
        informer_task.await.expect("task").expect("informer");
        took
    })
}

/// The initial sync figure's objects.
pub(crate) const SYNC_OBJECTS: u64 = 100_000;

/// The initial sync figure: `SYNC_OBJECTS` objects listed, until each was
/// reconciled once (keys in `groups` groups, if set).
pub(crate) fn sync_run(runtime: &Runtime, groups: Option<u64>) -> Duration {
    let store = MemoryStore::new("items");
    for id in 0..SYNC_OBJECTS {
        store.put(item(id, 1));
    }
    let reconciler = Arc::new(NoOp {
        target: 1,
        reached: (0..SYNC_OBJECTS).map(|_| AtomicBool::new(false)).collect(),
        ..NoOp::default()
    });
    let setup = Setup {
        groups,
        ..Setup::new(&store, Some(Duration::from_secs(10)))
    };
    run_until(
        runtime,
        setup,
        &reconciler,
        || {},
        |r| r.done.load(Ordering::Relaxed) == SYNC_OBJECTS as usize,
    )
}

/// The update storm figure's keys and updates.
pub(crate) const STORM_KEYS: u64 = 10_000;
pub(crate) const STORM_UPDATES: u64 = 1_000_000;

/// The update storm figure: `STORM_UPDATES` updates over `STORM_KEYS`
/// keys, until every key was reconciled at its final version; returns the
/// time and the reconciles.
pub(crate) fn storm_run(runtime: &Runtime, groups: Option<u64>) -> (Duration, usize) {
    // A history as long as the storm, as etcd's (compacted every few
    // minutes) would be: the figure is the pipeline's, not a relist's.
    let history = NonZeroUsize::new(STORM_UPDATES as usize).expect("non-zero");
    let store = MemoryStore::with_history("storm", history);
    for id in 0..STORM_KEYS {
        store.put(item(id, 0));
    }
    let reconciler = Arc::new(NoOp {
        target: STORM_UPDATES / STORM_KEYS,
        reached: (0..STORM_KEYS).map(|_| AtomicBool::new(false)).collect(),
        ..NoOp::default()
    });
    let writer = store.clone();
    let write = move || {
        std::thread::spawn(move || {
            for n in 0..STORM_UPDATES {
                writer.put(item(n % STORM_KEYS, n / STORM_KEYS + 1));
            }
        });
    };
    let setup = Setup {
        groups,
        ..Setup::new(&store, Some(Duration::from_secs(10)))
    };
    let took = run_until(runtime, setup, &reconciler, write, |r| {
        r.done.load(Ordering::Relaxed) == STORM_KEYS as usize
    });
    (took, reconciler.reconciles.load(Ordering::Relaxed))
}
