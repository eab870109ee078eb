//! What the queue reports: push hooks for metrics and pull snapshots.

use std::time::Duration;

/// Receives the queue's measurements, so that a metrics system can export
/// them (the manager maps them to client-go's `workqueue_*` metrics).
///
/// Every method has a no-op default. They are called on the task that
/// caused them (`depth` under the queue's lock, the others after it), so
/// they must be cheap and must not block.
pub trait QueueObserver: Send + Sync {
    /// A key was added and will be handed out (deduplicated adds are not
    /// counted): `workqueue_adds_total`.
    fn added(&self) {}

    /// The number of ready keys changed: `workqueue_depth`. Called while the
    /// queue's lock is held (so reports arrive in order): it must not call
    /// back into the queue.
    fn depth(&self, _ready: usize) {}

    /// A key was handed to a worker after waiting `_waited` since it became
    /// ready: `workqueue_queue_duration_seconds`.
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlightKey<K> {
    /// The key.
    pub key: K,
    /// How long ago a worker took it.
    pub age: Duration,
}
