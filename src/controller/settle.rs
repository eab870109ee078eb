//! What follows a reconcile: forget, back off, requeue, or give the key
//! back; and the observer's start and end of every reconcile.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::call::Ran;
use super::worker::Worker;
use super::{Action, ControllerObserver, ErrorPolicy, Outcome, Reconciler, Trigger};
use crate::object::Object;
use crate::queue::{Handed, Priority};

use super::Triggers;

/// Reports a reconcile's start and end to the observer, the end even when
/// handling the outcome panics (as a panic), so gauges such as active
/// workers never drift.
pub(super) struct Report<'a> {
    observer: &'a dyn ControllerObserver,
    started: Instant,
    finished: bool,
}

impl<'a> Report<'a> {
    pub(super) fn start(observer: &'a dyn ControllerObserver, started: Instant) -> Self {
        observer.reconcile_started();
        Self {
            observer,
            started,
            finished: false,
        }
    }

    pub(super) fn finish(&mut self, outcome: Outcome, took: Duration) {
        self.finished = true;
        self.observer.reconcile_finished(outcome, took);
    }
}

impl Drop for Report<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Unwinding from a panic, or the worker's task was aborted.
            let outcome = if std::thread::panicking() {
                Outcome::Panic
            } else {
                Outcome::Cancelled
            };
            self.finish(outcome, self.started.elapsed());
        }
    }
}

impl<O: Object, R: Reconciler<O>> Worker<O, R> {
    /// Why `ran` failed, for the journal; `None` unless it failed.
    pub(super) fn failure(&self, ran: &Ran<R::Error>) -> Option<Arc<str>> {
        match ran {
            Ran::Returned(Ok(_)) | Ran::Cancelled => None,
            Ran::Returned(Err(error)) => Some(Arc::from(error.to_string())),
            Ran::Panicked(message) => Some(Arc::from(format!("panicked: {message}"))),
            Ran::TimedOut => Some(Arc::from(match self.timeout {
                Some(timeout) => format!("timed out after {timeout:?}"),
                None => "timed out".to_owned(),
            })),
        }
    }

    /// Acts on the outcome: forget or back off, requeue, log.
    /// A retry or requeue keeps the priority the key ran at; a cancelled
    /// reconcile gives its key back as it was handed out (a leader that
    /// lost its term runs it when it leads again; a replica that moved the
    /// key's shard away skips it).
    pub(super) fn settle(
        &self,
        handed: &Handed<O::Key, Triggers>,
        attempt: u32,
        ran: Ran<R::Error>,
        took: Duration,
    ) -> Outcome {
        let (key, priority) = (&handed.key, handed.priority);
        match ran {
            Ran::Returned(Ok(action)) => self.returned(key, priority, attempt, action, took),
            Ran::Returned(Err(error)) => self.failed(key, priority, attempt, &error),
            Ran::Panicked(message) => {
                self.retry(key, priority);
                tracing::error!(panic = %message, "reconcile panicked, retrying with backoff");
                Outcome::Panic
            }
            Ran::TimedOut => {
                self.retry(key, priority);
                tracing::warn!(timeout = ?self.timeout, "reconcile timed out, retrying with backoff");
                Outcome::Timeout
            }
            Ran::Cancelled => {
                self.sink.give_back(key.clone(), priority, handed.payload);
                tracing::debug!("reconcile cancelled");
                Outcome::Cancelled
            }
        }
    }

    fn returned(
        &self,
        key: &O::Key,
        priority: Priority,
        attempt: u32,
        action: Action,
        took: Duration,
    ) -> Outcome {
        match action {
            Action::Done => {
                self.forget(key, attempt);
                tracing::debug!(?took, "reconciled");
                Outcome::Success
            }
            Action::Requeue => {
                self.sink
                    .push_backoff(key.clone(), Trigger::Requeue, priority);
                tracing::debug!(?took, "reconciled, requeue with backoff requested");
                Outcome::Requeue
            }
            Action::RequeueAfter(delay) => {
                self.forget(key, attempt);
                let delay = delay.max(Action::MIN_REQUEUE_DELAY);
                self.sink
                    .push_after(key.clone(), Trigger::Requeue, delay, priority);
                tracing::debug!(?took, ?delay, "reconciled, requeue requested");
                Outcome::RequeueAfter
            }
        }
    }

    /// A first attempt has no failures on record: nothing to forget (see
    /// `RateLimiter::retries`), and a hash-map removal saved per reconcile.
    fn forget(&self, key: &O::Key, attempt: u32) {
        if attempt > 1 {
            self.sink.queue.forget(key);
        }
    }

    /// A reconcile returned `error`: retried, or not if terminal.
    fn failed(&self, key: &O::Key, priority: Priority, attempt: u32, error: &R::Error) -> Outcome {
        match self.reconciler.error_policy(error) {
            ErrorPolicy::Terminal => {
                self.forget(key, attempt);
                tracing::error!(%error, "reconcile failed with a terminal error, not retrying");
                Outcome::TerminalError
            }
            ErrorPolicy::Retry => {
                self.retry(key, priority);
                tracing::warn!(%error, "reconcile failed, retrying with backoff");
                Outcome::Error
            }
            ErrorPolicy::RetryAfter(delay) => {
                // Not `clamp`: it panics on a bound below the floor.
                let delay = delay
                    .min(self.max_retry_after)
                    .max(Action::MIN_REQUEUE_DELAY);
                self.sink.push_retry_after(key.clone(), delay, priority);
                tracing::warn!(%error, ?delay, "reconcile failed, retrying after the delay its error gave");
                Outcome::Error
            }
        }
    }

    pub(super) fn retry(&self, key: &O::Key, priority: Priority) {
        self.sink
            .push_backoff(key.clone(), Trigger::Retry, priority);
    }
}
