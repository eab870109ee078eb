//! The user's logic: the `Reconciler` trait and what a reconcile returns.

use std::future::Future;
use std::time::Duration;

use super::Context;
use crate::object::Object;

/// Your reconciliation logic for objects of type `O`: observe, compare, act.
///
/// [`reconcile`](Reconciler::reconcile) is called with a [`Context`] holding
/// the key and the *current* cached object (`None` when it no longer exists:
/// absence is a state to reconcile, e.g. by cleaning up what it owned). It
/// must be idempotent and level-triggered: decide from the state as it is
/// now, never from the event that caused the call, which may have been
/// coalesced with others, lost, or repeated.
///
/// Implement it with `async fn`; the returned future must be `Send`. The
/// controller is generic over the reconciler (no boxing, no `dyn`): put
/// clients and caches in your type's fields.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone)] struct Widget;
/// # impl tend::Object for Widget {
/// #     type Key = String;
/// #     fn key(&self) -> String { String::new() }
/// #     fn version(&self) -> tend::Revision { tend::Revision::ZERO }
/// #     fn set_version(&mut self, _: tend::Revision) {}
/// # }
///
/// struct Widgets;
///
/// impl Reconciler<Widget> for Widgets {
///     type Error = Infallible;
///
///     async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
///         match ctx.object() {
///             Some(_widget) => { /* compare desired and actual, act */ }
///             None => { /* deleted: clean up what it owned */ }
///         }
///         Ok(Action::Done)
///     }
/// }
/// ```
pub trait Reconciler<O: Object>: Send + Sync + 'static {
    /// Your error type; it stays yours (tend never wraps it).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Closes the gap between desired and actual state for `ctx.key()`.
    ///
    /// On `Err`, [`error_policy`](Reconciler::error_policy) decides whether the
    /// key is retried with backoff or dropped. The future is dropped (so
    /// cancelled at its current `.await`) when it exceeds the controller's
    /// reconcile timeout, when leadership is lost, or when shutdown's grace
    /// period ends; [`Context::cancelled`] is cancelled just before, for work
    /// the reconcile spawned. Write reconciles so that stopping at any
    /// `.await` is safe: the next reconcile starts from the observed state.
    fn reconcile(
        &self,
        ctx: Context<O>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// What to do with a failed key (default: [`ErrorPolicy::Retry`]).
    fn error_policy(&self, error: &Self::Error) -> ErrorPolicy {
        let _ = error;
        ErrorPolicy::Retry
    }
}

/// What a successful reconcile asks for next.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::controller::Action;
///
/// fn next(ready: bool, operation_pending: bool) -> Action {
///     if ready {
///         Action::Done // until something changes
///     } else if operation_pending {
///         Action::RequeueAfter(Duration::from_secs(5)) // poll it
///     } else {
///         Action::Requeue // not there yet: again soon, backing off
///     }
/// }
/// assert_eq!(next(true, false), Action::Done);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next change or resync; the key's backoff is reset.
    Done,
    /// Reconcile again after the key's backoff, as after a failure but with
    /// no error (controller-runtime's `Requeue: true`): repeated requeues
    /// wait longer and longer (5 ms doubling to 1000 s with the default rate
    /// limiter), [`Context::attempt`](super::Context::attempt) counts them,
    /// and the next reconcile reports [`Trigger::Requeue`](super::Trigger).
    /// `Done` or `RequeueAfter` resets the backoff. Like a retry, it waits
    /// at least [`Action::MIN_REQUEUE_DELAY`], whatever the rate limiter says.
    Requeue,
    /// Reconcile again after this long, even if nothing changes (polling an
    /// external system, waiting for a slow operation); resets the backoff.
    ///
    /// Delays shorter than [`Action::MIN_REQUEUE_DELAY`] (1 ms), zero
    /// included, wait that long: an immediate requeue would make the key a
    /// busy loop that never lets the runtime idle (and stops tokio's paused
    /// clock in tests). The key then waits in the queue like any timed key,
    /// so other keys are not starved.
    RequeueAfter(Duration),
}

impl Action {
    /// The shortest wait of [`Action::RequeueAfter`].
    pub const MIN_REQUEUE_DELAY: Duration = Duration::from_millis(1);
}

/// How a reconcile error is handled.
///
/// Returned by [`Reconciler::error_policy`] for each error.
///
/// # Examples
///
/// ```
/// use tend::controller::{Action, Context, ErrorPolicy, Reconciler};
/// # #[derive(Clone, Debug)] struct Site { name: String, version: tend::Revision }
/// # tend::impl_object!(Site, key: name: String, version: version);
///
/// #[derive(Debug, thiserror::Error)]
/// enum DeployError {
///     #[error("invalid spec: {0}")]
///     InvalidSpec(String),
///     #[error("the registry is unreachable")]
///     Registry,
/// }
///
/// struct Deploy;
///
/// impl Reconciler<Site> for Deploy {
///     type Error = DeployError;
///     # async fn reconcile(&self, _: Context<Site>) -> Result<Action, DeployError> {
///     #     Err(DeployError::Registry)
///     # }
///     // `reconcile` deploys the site, failing with a `DeployError`.
///
///     fn error_policy(&self, error: &DeployError) -> ErrorPolicy {
///         match error {
///             DeployError::InvalidSpec(_) => ErrorPolicy::Terminal, // until the spec changes
///             DeployError::Registry => ErrorPolicy::Retry, // with backoff
///         }
///     }
/// }
///
/// let invalid = DeployError::InvalidSpec("no image".into());
/// assert_eq!(Deploy.error_policy(&invalid), ErrorPolicy::Terminal);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// Retry the key after its rate limiter's backoff (5 ms doubling to
    /// 1000 s by default). If a change to the key arrived during the failed
    /// reconcile, it runs again at once for that change, and the failure is
    /// not counted (unlike client-go): the new state may not fail.
    Retry,
    /// Retry the key after this long instead of its backoff, for this
    /// attempt only: the error said when (a `Retry-After`, a `429` with a
    /// delay, "the volume is attaching, try in a minute"; see
    /// [`ClientError::retry_after`](crate::client::ClientError::retry_after)).
    /// It is still a failure: logged and counted as an error, and one more
    /// on the key's record, so a later error that does not say backs off
    /// as the next failure would. The delay is bounded:
    /// at least [`Action::MIN_REQUEUE_DELAY`], at most
    /// [`ControllerBuilder::max_retry_after`](super::ControllerBuilder::max_retry_after)
    /// (1000 s by default), so `Duration::MAX` cannot park a key for ever.
    /// As with `Retry`, a change that arrived during the failed reconcile
    /// runs it again at once, for that change: then neither the delay nor
    /// the failure is recorded (level-triggered: the new state may not
    /// fail).
    RetryAfter(Duration),
    /// Do not retry: the error is logged and counted, the key's backoff state
    /// is dropped, and only a new change or resync runs it again (invalid
    /// specs that no retry can fix).
    Terminal,
}
