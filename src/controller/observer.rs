//! What a controller reports about its reconciles.

use std::time::Duration;

use super::Triggers;

/// How one reconcile ended, as counted by metrics.
///
/// # Examples
///
/// ```
/// use tend::controller::Outcome;
///
/// assert!(Outcome::RequeueAfter.succeeded()); // returned `Ok`
/// assert!(!Outcome::Timeout.succeeded());
/// assert_eq!(Outcome::Panic.result_label(), Some("error")); // controller-runtime's label
/// assert_eq!(Outcome::Cancelled.result_label(), None); // it did not finish
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// [`Action::Done`](super::Action::Done).
    Success,
    /// [`Action::Requeue`](super::Action::Requeue): again after the key's backoff.
    Requeue,
    /// [`Action::RequeueAfter`](super::Action::RequeueAfter).
    RequeueAfter,
    /// The reconciler returned an error that will be retried.
    Error,
    /// The reconciler returned an error with
    /// [`ErrorPolicy::Terminal`](super::ErrorPolicy::Terminal).
    TerminalError,
    /// The reconcile panicked; it will be retried.
    Panic,
    /// The reconcile exceeded its timeout; it will be retried.
    Timeout,
    /// The reconcile was cancelled by shutdown or lost leadership.
    Cancelled,
}

impl Outcome {
    /// Whether the reconcile returned `Ok` (any [`Action`](super::Action)).
    #[must_use]
    pub const fn succeeded(self) -> bool {
        matches!(self, Self::Success | Self::Requeue | Self::RequeueAfter)
    }

    /// controller-runtime's `result` label: `success`, `error`, `requeue` or
    /// `requeue_after` (panics, timeouts and terminal errors are errors);
    /// `None` for a cancelled reconcile, which did not finish.
    #[must_use]
    pub const fn result_label(self) -> Option<&'static str> {
        match self {
            Self::Success => Some("success"),
            Self::Requeue => Some("requeue"),
            Self::RequeueAfter => Some("requeue_after"),
            Self::Error | Self::TerminalError | Self::Panic | Self::Timeout => Some("error"),
            Self::Cancelled => None,
        }
    }
}

/// Receives a controller's measurements (the manager exports them as
/// controller-runtime's `controller_runtime_*` metrics, and `tend_controller_*`
/// where it has none). Methods default to no-ops and are called on the
/// worker unless they say otherwise, so they must be cheap, and must not
/// panic (an end is reported while unwinding from a panic elsewhere). Every
/// `reconcile_started` is followed by one `reconcile_finished`.
///
/// # Examples
///
/// Counting failed reconciles of a controller whose first attempt fails:
///
/// ```
/// # use std::time::Duration;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # use tend::memory::MemoryStore;
/// # use tend::testing::Harness;
/// # use tend::{Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// # struct Flaky;
/// # impl Reconciler<Light> for Flaky {
/// #     type Error = std::io::Error;
/// #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, std::io::Error> {
/// #         if ctx.attempt() == 1 { Err(std::io::Error::other("flaky")) } else { Ok(Action::Done) }
/// #     }
/// # }
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tend::controller::{ControllerObserver, Outcome};
///
/// #[derive(Default)]
/// struct Failures(AtomicU64);
///
/// impl ControllerObserver for Failures {
///     fn reconcile_finished(&self, outcome: Outcome, _took: Duration) {
///         if !outcome.succeeded() {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let store = MemoryStore::new("lights");
/// # let informer = Informer::builder(store.clone()).build()?;
/// let failures = Arc::new(Failures::default());
/// let controller = Controller::builder("flaky", &informer, Flaky)
///     .observer(failures.clone())
///     .build()?;
/// # let mut harness = Harness::new();
/// # harness.informer(&informer);
/// # harness.controller(controller);
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// harness.settle(Duration::from_secs(60)).await?;
/// assert_eq!(failures.0.load(Ordering::Relaxed), 1); // then its retry succeeded
/// # harness.shutdown().await?;
/// # Ok(()) }
/// ```
pub trait ControllerObserver: Send + Sync {
    /// A worker started a reconcile (`controller_runtime_active_workers` + 1).
    fn reconcile_started(&self) {}

    /// A reconcile ended after `_took`
    /// (`controller_runtime_active_workers` − 1, `reconcile_total`,
    /// `reconcile_time_seconds`, the error, panic and timeout counters).
    ///
    /// Called once the outcome has been acted on (the key forgotten, or its
    /// retry or requeue scheduled) but *before* the worker ends the key in
    /// the queue: while it runs, the key still counts as in flight
    /// ([`WorkQueue::in_flight`](crate::WorkQueue::in_flight)), and a change
    /// that arrives now queues it again once it ends.
    fn reconcile_finished(&self, _outcome: Outcome, _took: Duration) {}

    /// A reconcile is starting `_latency` after what woke it
    /// (`tend_controller_reconcile_latency_seconds{trigger}`, one
    /// observation per reason in `_triggers`). Called before
    /// [`reconcile_started`](Self::reconcile_started).
    ///
    /// The latency counts from when the change reached the controller (its
    /// informer's handler queued the key as it applied the change; the
    /// first change, when several coalesced) to the worker taking the key:
    /// the debounce window, the wait behind the key's running reconcile,
    /// its read-your-writes hold and the wait for a free worker. A retry or
    /// requeue counts from when it was due: the delay it asked for is not
    /// latency.
    fn reconcile_latency(&self, _triggers: Triggers, _latency: Duration) {}

    /// A key became hot (see
    /// [`ControllerBuilder::hot_keys`](super::ControllerBuilder::hot_keys)):
    /// an episode began (`tend_controller_hot_key_episodes_total`).
    fn hot_key(&self) {}

    /// A key's wait for the caches to show its writes (read-your-writes)
    /// passed its bound; it was reconciled anyway
    /// (`tend_controller_read_your_writes_timeouts_total`). Called on the
    /// controller's gate task.
    fn read_your_writes_expired(&self) {}

    /// A write through a reconcile's client
    /// ([`Context::client`](super::Context::client)) was refused with
    /// [`ClientError::Fenced`](crate::client::ClientError::Fenced): its
    /// fencing token (the leader's, or the key's shard's) was no longer
    /// current (`tend_controller_fenced_writes_refused_total`). Called on
    /// the task that wrote: a worker, or a task the reconcile spawned, also
    /// after the reconcile returned.
    fn fenced_write_refused(&self) {}
}

/// The observer used when none is configured.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoopObserver;

impl ControllerObserver for NoopObserver {}
