//! One reconcile call: panics caught, its timeout, and what may stop it
//! early (the worker's hard stop, its slot's handover).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::scope::Scope;
use super::{Action, Context, Reconciler, Triggers};
use crate::object::Object;
use crate::queue::Batch;

/// How a reconcile call ended.
pub(super) enum Ran<E> {
    Returned(Result<Action, E>),
    Panicked(String),
    TimedOut,
    Cancelled,
}

/// What may end a reconcile before it returns.
pub(super) struct Stops<'a> {
    /// The worker's token: the controller's hard stop.
    pub(super) worker: &'a CancellationToken,
    /// The handover of the key's slot passed its bound (or the slot was
    /// lost at once).
    pub(super) handover: Option<&'a CancellationToken>,
    /// The reconcile's own scope: its token is cancelled on a timeout or a
    /// handover, before the future is dropped.
    pub(super) scope: &'a Scope,
    /// The longest it may run.
    pub(super) timeout: Option<Duration>,
}

impl Stops<'_> {
    fn stopped(&self) -> bool {
        self.worker.is_cancelled() || self.handover.is_some_and(CancellationToken::is_cancelled)
    }
}

/// Runs `reconciler` on `ctx` with panic catching and `stops`. If the
/// reconcile waits, the unstarted keys of `batch` are released first (and
/// `true` returned with the outcome).
pub(super) async fn call<O: Object, R: Reconciler<O>>(
    reconciler: &R,
    ctx: Context<O>,
    stops: Stops<'_>,
    batch: &mut Batch<'_, O::Key, Triggers>,
) -> (Ran<R::Error>, bool) {
    if stops.stopped() {
        return (Ran::Cancelled, false);
    }
    // Built inside the guarded future: a `reconcile` that panics before
    // its first `.await` is caught too.
    let reconcile = AssertUnwindSafe(async move { reconciler.reconcile(ctx).await });
    let mut reconcile = std::pin::pin!(reconcile.catch_unwind());
    let finished = |ran: std::thread::Result<Result<Action, R::Error>>| match ran {
        Ok(result) => Ran::Returned(result),
        Err(panic) => Ran::Panicked(panic_message(&*panic)),
    };
    // Most reconciles finish in their first poll: only arm the timer (a
    // runtime lookup and a clock read) and register with the token (a
    // lock) for those that wait.
    if let std::task::Poll::Ready(ran) = futures::poll!(reconcile.as_mut()) {
        return (finished(ran), false);
    }
    batch.release();
    let deadline = stops
        .timeout
        .and_then(|limit| Instant::now().checked_add(limit));
    let ran = tokio::select! {
        biased;
        ran = &mut reconcile => finished(ran),
        () = stops.worker.cancelled() => Ran::Cancelled,
        () = cancelled(stops.handover) => {
            stops.scope.cancel();
            Ran::Cancelled
        }
        () = sleep_until(deadline) => {
            stops.scope.cancel();
            Ran::TimedOut
        }
    };
    (ran, true)
}

async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// A panic's message, when it has one.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| String::from("non-string panic payload"))
}
