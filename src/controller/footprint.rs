//! The sizes of a controller's per-key tables, read while it runs: what a
//! leak check or a soak watches.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Triggers;
use super::hot_keys::HotKeys;
use crate::queue::{QueueKey, WorkQueue};

/// How many keys each of a controller's per-key tables holds. Each is
/// bounded by the keys with something pending (queued, failing, deleted
/// and awaiting their reconcile, held for their writes…), and goes back to
/// 0 once nothing is: a table that only grows is a leak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableSizes {
    /// Keys in the queue: ready, scheduled or in flight.
    pub queued: usize,
    /// Keys the rate limiter keeps failures for.
    pub rate_limited: usize,
    /// Deleted objects' last states awaiting their key's reconcile.
    pub last_states: usize,
    /// Sharded: deletions kept for shards this replica may gain.
    pub departed: usize,
    /// Keys held in flight until the cache shows their writes.
    pub awaiting_writes: usize,
    /// Hot keys held in flight for their spacing.
    pub spaced: usize,
    /// Keys with a write count kept by hot-key detection.
    pub hot_keys: usize,
    /// Keys with tracked reads on record, plus those with a read cause kept.
    pub tracked_reads: usize,
}

impl TableSizes {
    /// Each table with its name as the metric
    /// `tend_controller_table_keys{table}` and the status page give it.
    #[must_use]
    pub fn by_name(&self) -> [(&'static str, usize); 8] {
        [
            ("queued", self.queued),
            ("rate_limited", self.rate_limited),
            ("last_states", self.last_states),
            ("departed", self.departed),
            ("awaiting_writes", self.awaiting_writes),
            ("spaced", self.spaced),
            ("hot_keys", self.hot_keys),
            ("tracked_reads", self.tracked_reads),
        ]
    }
}

/// A handle on a controller's per-key tables
/// ([`Controller::footprint`](super::Controller::footprint)), cheap to
/// clone; the tables made when the controller runs count from then on (0
/// before).
///
/// # Lock order
///
/// `sizes` takes each table's own lock in turn (and the queue's), never
/// two at once: it must not be called where one of them is held (a queue
/// observer, a group function, a rate limiter).
///
/// # Examples
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # use tend::{Informer, Revision, memory::MemoryStore};
/// # #[derive(Clone, Debug)]
/// # struct App { name: String, version: Revision }
/// # tend::impl_object!(App, key: name: String, version: version);
/// # struct Apps;
/// # impl Reconciler<App> for Apps {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<App>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let apps = Informer::builder(MemoryStore::<App>::new("apps")).build()?;
/// let controller = Controller::builder("apps", &apps, Apps).build()?;
/// let footprint = controller.footprint();
/// assert_eq!(footprint.sizes().queued, 0);
/// # Ok(()) }
/// ```
pub struct Footprint<K> {
    inner: Arc<Tables<K>>,
}

struct Tables<K> {
    queue: WorkQueue<K, Triggers>,
    hot_keys: HotKeys<K>,
    last_states: Arc<dyn Counted>,
    /// The tables a run makes, registered as it makes them.
    run: Mutex<Vec<(Table, Arc<dyn Counted>)>>,
}

/// A table a run makes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Table {
    Departed,
    AwaitingWrites,
    Spaced,
    TrackedReads,
}

/// A table that counts its keys.
pub(super) trait Counted: Send + Sync {
    fn count(&self) -> usize;
}

impl<K: QueueKey> Footprint<K> {
    pub(super) fn new(
        queue: WorkQueue<K, Triggers>,
        hot_keys: HotKeys<K>,
        last_states: Arc<dyn Counted>,
    ) -> Self {
        Self {
            inner: Arc::new(Tables {
                queue,
                hot_keys,
                last_states,
                run: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Counts a table the run made (a controller runs once).
    pub(super) fn register(&self, table: Table, counted: Arc<dyn Counted>) {
        self.inner.run.lock().push((table, counted));
    }

    /// Each table's size now (each read on its own: not one snapshot).
    #[must_use]
    pub fn sizes(&self) -> TableSizes {
        let inner = &self.inner;
        let mut sizes = TableSizes {
            queued: inner.queue.keys_len(),
            rate_limited: inner.queue.rate_limited(),
            last_states: inner.last_states.count(),
            hot_keys: inner.hot_keys.tracked(),
            ..TableSizes::default()
        };
        // Copied out: each table's lock is taken with no other held.
        let run = inner.run.lock().clone();
        for (table, counted) in &run {
            let size = match table {
                Table::Departed => &mut sizes.departed,
                Table::AwaitingWrites => &mut sizes.awaiting_writes,
                Table::Spaced => &mut sizes.spaced,
                Table::TrackedReads => &mut sizes.tracked_reads,
            };
            *size += counted.count();
        }
        sizes
    }
}

impl<K> Clone for Footprint<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for Footprint<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Footprint")
            .field("run_tables", &self.inner.run.lock().len())
            .finish_non_exhaustive()
    }
}

impl<O: crate::object::Object> Counted for super::last_states::LastStates<O> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<O: crate::object::Object> Counted for super::departed::Departed<O> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<K: QueueKey> Counted for super::gate::Gate<K> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<K: QueueKey> Counted for super::spacer::Spacer<K> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<K: QueueKey> Counted for super::reads::Tracker<K> {
    fn count(&self) -> usize {
        self.held()
    }
}
