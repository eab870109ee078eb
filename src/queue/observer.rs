//! What the queue reports: push hooks for metrics and pull snapshots.

use std::time::Duration;

use super::{Payload, QueueKey, WorkQueue, groups};
use crate::sync::lock;

/// Receives the queue's measurements, so that a metrics system can export
/// them (the manager maps them to client-go's `workqueue_*` metrics).
///
/// Every method has a no-op default. They are called on the task that
/// caused them (`depth` under the queue's lock, the others after it), so
/// they must be cheap and must not block.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tend::{QueueObserver, WorkQueue};
///
/// /// Counts the keys added: `workqueue_adds_total`.
/// #[derive(Default)]
/// struct Adds(AtomicU64);
///
/// impl QueueObserver for Adds {
///     fn added(&self) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let adds = Arc::new(Adds::default());
/// let queue: WorkQueue<&str> = WorkQueue::builder().observer(adds.clone()).build();
/// queue.add("web");
/// queue.add("web"); // deduplicated: not counted
/// queue.add("db");
/// assert_eq!(adds.0.load(Ordering::Relaxed), 2);
/// ```
pub trait QueueObserver: Send + Sync {
    /// A key was added and will be handed out (deduplicated adds are not
    /// counted): `workqueue_adds_total`.
    fn added(&self) {}

    /// The number of ready keys changed: `workqueue_depth`. Called while the
    /// queue's lock is held (so reports arrive in order): it must not call
    /// back into the queue.
    fn depth(&self, _ready: usize) {}

    /// A key was handed to a worker after waiting `_waited` since it became
    /// ready (a debounced key: since its first change):
    /// `workqueue_queue_duration_seconds`.
    fn queued_for(&self, _waited: Duration) {}

    /// A worker finished a key it held for `_worked`:
    /// `workqueue_work_duration_seconds`.
    fn worked_for(&self, _worked: Duration) {}

    /// A key was re-added through the rate limiter: `workqueue_retries_total`.
    fn retried(&self) {}

    /// The rate limiter panicked: in `when` (the key was retried after the
    /// fallback delay of [`add_rate_limited`](crate::WorkQueue::add_rate_limited)),
    /// `forget` or `retries`: `tend_workqueue_rate_limiter_panics_total`.
    fn limiter_panicked(&self) {}

    /// Shutdown dropped `_keys` keys that were ready, scheduled or dirty.
    fn dropped(&self, _keys: u64) {}
}

/// The observer used when none is configured: it ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoopObserver;

impl QueueObserver for NoopObserver {}

/// A snapshot of the queue's sizes, taken under its lock.
///
/// The age of in-flight work is pulled rather than pushed: a metrics scrape
/// reads [`unfinished_work`](QueueStats::unfinished_work) and
/// [`longest_running`](QueueStats::longest_running)
/// (`workqueue_unfinished_work_seconds`,
/// `workqueue_longest_running_processor_seconds`) without a timer task.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = WorkQueue::new();
/// queue.add("web");
/// queue.add("db");
/// queue.add_after("cache", Duration::from_secs(30));
/// let _web = queue.get().await.unwrap(); // a worker takes it…
/// tokio::time::advance(Duration::from_secs(2)).await; // …and works for 2 s
///
/// let stats = queue.stats();
/// assert_eq!((stats.ready, stats.scheduled, stats.in_flight), (1, 1, 1));
/// assert_eq!(stats.longest_running, Some(Duration::from_secs(2)));
/// assert_eq!(stats.unfinished_work, Duration::from_secs(2));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueStats {
    /// Keys ready to be handed out.
    pub ready: usize,
    /// Keys waiting for a timer (`add_after`, `add_rate_limited`).
    pub scheduled: usize,
    /// Keys held by workers.
    pub in_flight: usize,
    /// Keys dropped by shutdown, in total.
    pub dropped: u64,
    /// The sum of the ages of all in-flight keys.
    pub unfinished_work: std::time::Duration,
    /// The age of the oldest in-flight key.
    pub longest_running: Option<std::time::Duration>,
}

/// A key held by a worker and for how long: the "which key is stuck" view.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tend::DoneError> {
/// let queue = WorkQueue::new();
/// queue.add("web");
/// let key = queue.get().await.unwrap();
/// tokio::time::advance(Duration::from_secs(90)).await;
///
/// let held = queue.in_flight(); // oldest first
/// assert_eq!((held[0].key, held[0].age), ("web", Duration::from_secs(90)));
/// queue.done(&key)?;
/// assert!(queue.in_flight().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlightKey<K> {
    /// The key.
    pub key: K,
    /// How long ago a worker took it.
    pub age: Duration,
}

impl<K: QueueKey, T: Payload> WorkQueue<K, T> {
    /// Sizes of the queue, and the age of its in-flight work.
    #[must_use]
    pub fn stats(&self) -> QueueStats {
        let now = self.now();
        let core = lock(&self.shared.core);
        let ages = core
            .in_flight()
            .map(|(_, t)| now.saturating_duration_since(t));
        let (unfinished_work, longest_running) = ages
            .fold((Duration::ZERO, None), |(sum, max), age| {
                (sum + age, Some(max.map_or(age, |m: Duration| m.max(age))))
            });
        QueueStats {
            ready: core.ready_len(),
            scheduled: core.scheduled_len(),
            in_flight: core.in_flight_len(),
            dropped: core.dropped(),
            unfinished_work,
            longest_running,
        }
    }

    /// Every key held by a worker with its age, oldest first: the "which key
    /// is stuck" view.
    #[must_use]
    pub fn in_flight(&self) -> Vec<InFlightKey<K>> {
        let now = self.now();
        let mut keys: Vec<_> = lock(&self.shared.core)
            .in_flight()
            .map(|(key, started)| InFlightKey {
                key: key.clone(),
                age: now.saturating_duration_since(started),
            })
            .collect();
        keys.sort_by_key(|k| std::cmp::Reverse(k.age));
        keys
    }

    /// The ready keys in `group`, as the builder's
    /// [`group_by`](super::WorkQueueBuilder::group_by) function names it (0 for
    /// every group without one).
    #[must_use]
    pub fn ready_in_group<G: std::hash::Hash + ?Sized>(&self, group: &G) -> usize {
        lock(&self.shared.core).ready_in_group(groups::group_hash(group))
    }

    /// The ready keys of each group named for metrics
    /// (`ControllerBuilder::group_metrics`), by label, in one snapshot.
    pub(crate) fn metered_groups(&self) -> Vec<(String, usize)> {
        if self.shared.metered.is_empty() {
            return Vec::new();
        }
        let core = lock(&self.shared.core);
        let depth = |(label, hash): &(String, u64)| (label.clone(), core.ready_in_group(*hash));
        self.shared.metered.iter().map(depth).collect()
    }
}
