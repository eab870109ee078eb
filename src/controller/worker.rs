//! A worker: take a key, read the current object, reconcile, act on the
//! outcome, `done`. Panics and timeouts are caught here.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::Caches;
use super::gate::Gate;
use super::last_states::LastStates;
use super::scope::Scope;
use super::shards::Claim;
use super::watch::Enqueue;
use super::{
    Action, Context, ControllerObserver, ErrorPolicy, Outcome, Reconciler, Trigger, Triggers,
};
use crate::informer::Store;
use crate::queue::{Batch, Handed, Priority};
use crate::source::Object;

/// Keys a worker takes at once from a backlog, while its reconciles are
/// quick: one queue lock per run instead of one per key.
const RUN: usize = 16;

/// A reconcile this short is "quick": a run of them holds its keys from
/// other workers for well under a millisecond.
const QUICK: Duration = Duration::from_micros(50);

/// What the workers share: one per controller run.
pub(super) struct Worker<O: Object, R> {
    pub(super) name: String,
    pub(super) store: Store<O>,
    pub(super) reconciler: R,
    pub(super) sink: Enqueue<O::Key>,
    pub(super) caches: Arc<Caches>,
    pub(super) timeout: Option<Duration>,
    pub(super) observer: Arc<dyn ControllerObserver>,
    pub(super) fencing_token: Option<Arc<dyn Fn() -> Option<u64> + Send + Sync>>,
    /// How many workers share the queue.
    pub(super) workers: usize,
    /// Holds keys until the caches show their writes (read-your-writes on).
    pub(super) gate: Option<Gate<O::Key>>,
    /// Deleted primary objects' last states, until reconciled.
    pub(super) last_states: Arc<LastStates<O>>,
}

/// Reports a reconcile's start and end to the observer, the end even when
/// handling the outcome panics (as a panic), so gauges such as active
/// workers never drift.
struct Report<'a> {
    observer: &'a dyn ControllerObserver,
    started: Instant,
    finished: bool,
}

impl<'a> Report<'a> {
    fn start(observer: &'a dyn ControllerObserver, started: Instant) -> Self {
        observer.reconcile_started();
        Self {
            observer,
            started,
            finished: false,
        }
    }

    fn finish(&mut self, outcome: Outcome, took: Duration) {
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

/// How a worker paces its trips to the queue: runs of keys while
/// reconciles are quick, one key at a time once one is slow.
struct Pace {
    quick: bool,
    /// The clock reading that ended the last reconcile: it starts the next.
    last_end: Instant,
    /// Ready keys a run leaves for the other workers.
    spare: usize,
}

impl Pace {
    fn new(workers: usize) -> Self {
        Self {
            quick: true,
            last_end: Instant::now(),
            spare: workers.saturating_sub(1),
        }
    }

    /// How many keys the next run may take.
    fn run(&self) -> usize {
        if self.quick { RUN } else { 1 }
    }

    /// `key`, started at `started`, ended at `ended`. A slow reconcile
    /// that did not wait held the rest of its run: released now, for free
    /// workers to take.
    /// `key` is `None` when the gate holds it (read-your-writes): the gate
    /// ends it.
    fn finished<K: crate::QueueKey>(
        &mut self,
        batch: &mut Batch<'_, K, Triggers>,
        key: Option<K>,
        started: Instant,
        ended: Instant,
        waited: bool,
    ) {
        let took = ended.saturating_duration_since(started);
        self.quick &= !waited && took < QUICK;
        if let Some(key) = key {
            batch.finish(key, took);
        }
        self.last_end = ended;
        if !self.quick && batch.has_unstarted() {
            batch.release();
        }
    }
}

/// How a reconcile call ended.
enum Ran<E> {
    Returned(Result<Action, E>),
    Panicked(String),
    TimedOut,
    Cancelled,
}

impl<O: Object, R: Reconciler<O>> Worker<O, R> {
    /// Processes keys until the queue shuts down.
    ///
    /// Keys come in batches (see `queue::Batch`): from a backlog, while
    /// reconciles are quick, up to `RUN` keys under one lock, ended together
    /// when the next run is taken; no run leaves another worker without a
    /// ready key (`spare`), and a reconcile that waits, or turns out slow,
    /// hands the rest back. A slow controller takes one key at a time.
    pub(super) async fn run(self: Arc<Self>, hard_stop: CancellationToken) {
        // The worker's own token (a child of the shared hard stop, so that
        // watching it locks no shared node), and each reconcile's child of
        // it, made only when the reconcile asks.
        let stop = Arc::new(hard_stop.child_token());
        let mut scope = Arc::new(Scope::new(Arc::clone(&stop), Arc::clone(&self.observer)));
        let caches = Arc::new(Caches::clone(&self.caches));
        let mut batch = self.sink.queue.batch();
        let mut pace = Pace::new(self.workers);
        loop {
            // Reconciles that finish without waiting never yield to tokio:
            // spend the task's budget so a backlog cannot monopolise a thread.
            tokio::task::consume_budget().await;
            let Some((handed, started)) = self.take(&mut batch, &mut pace).await else {
                return;
            };
            // Sharded: held until the reconcile has been settled, so the
            // shard's handover waits for it.
            let Ok(claim) = self.sink.claim(&handed.key) else {
                self.skip(&mut batch, &mut pace, handed.key, started);
                continue;
            };
            // User callbacks run around the reconcile (error policy,
            // observers, the error's Display): a panic in any of them must
            // not end the worker nor strand its key. (The queue catches its
            // observer's panics itself.)
            let tokens = (&*stop, &scope, claim.as_ref());
            let processed =
                AssertUnwindSafe(self.process(&handed, tokens, &caches, &mut batch, started));
            let (ended, waited) = match processed.catch_unwind().await {
                Ok(done) => done,
                Err(panic) => self.recover(&handed, &*panic),
            };
            drop(claim);
            let writes = scope.take_writes();
            Scope::recycle(&mut scope);
            let key = match &self.gate {
                Some(gate) => gate.hold(handed.key, writes, caches.revisions(), ended),
                None => Some(handed.key),
            };
            pace.finished(&mut batch, key, started, ended, waited);
        }
    }

    /// Ends a key of a shard this replica does not own (any more) without
    /// reconciling it: its owner reconciles it (a deleted one too: every
    /// replica keeps the deletions for the shards it gains), so its last
    /// state is not kept here either.
    fn skip(
        &self,
        batch: &mut Batch<'_, O::Key, Triggers>,
        pace: &mut Pace,
        key: O::Key,
        started: Instant,
    ) {
        tracing::debug!(controller = %self.name, ?key, "skipping a key of a shard not owned");
        self.sink.queue.forget(&key);
        self.last_states.forget(&key);
        pace.finished(batch, Some(key), started, Instant::now(), false);
    }

    /// The next key and when its processing starts: from the batch, or
    /// waiting on the queue; `None` once the queue is shut down.
    async fn take(
        &self,
        batch: &mut Batch<'_, O::Key, Triggers>,
        pace: &mut Pace,
    ) -> Option<(Handed<O::Key, Triggers>, Instant)> {
        loop {
            let max = pace.run();
            // Ending the run and taking the next starts afresh, quick.
            pace.quick |= batch.will_refill();
            if let Some(handed) = batch.next(pace.last_end, max, pace.spare) {
                return Some((handed, pace.last_end));
            }
            match AssertUnwindSafe(self.sink.queue.get_handed())
                .catch_unwind()
                .await
            {
                Ok(taken) => return taken.map(|handed| (handed, Instant::now())),
                Err(panic) => {
                    tracing::error!(controller = %self.name, panic = %panic_message(&*panic), "taking a key panicked");
                }
            }
        }
    }

    /// After handling a reconcile's outcome panicked: retries the key and
    /// says it ended now, having waited (perhaps timed out: unknown).
    fn recover(
        &self,
        handed: &Handed<O::Key, Triggers>,
        panic: &(dyn Any + Send),
    ) -> (Instant, bool) {
        tracing::error!(controller = %self.name, key = ?handed.key, panic = %panic_message(panic), "handling a reconcile's outcome panicked, retrying the key");
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.retry(&handed.key, handed.priority);
        }));
        (Instant::now(), true)
    }

    /// Reconciles `key` (taken at `started`); returns when it ended and
    /// whether the reconcile waited.
    async fn process(
        &self,
        handed: &Handed<O::Key, Triggers>,
        (stop, scope, claim): (&CancellationToken, &Arc<Scope>, Option<&Claim>),
        caches: &Arc<Caches>,
        batch: &mut Batch<'_, O::Key, Triggers>,
        started: Instant,
    ) -> (Instant, bool) {
        let queue = &self.sink.queue;
        let key = &handed.key;
        let triggers = handed.payload;
        let attempt = queue.retries(key).saturating_add(1);
        // After a failure, whatever queued this run (the retry timer, or a
        // change that came first), it is also a retry; after a backoff
        // requeue, it is that.
        let triggers = if attempt > 1 && !triggers.contains(Trigger::Requeue) {
            triggers.with(Trigger::Retry)
        } else {
            triggers
        };
        let object = self.store.get(key);
        let last = match object {
            None => self.last_states.get(key),
            Some(_) => None,
        };
        let ctx = Context {
            key: key.clone(),
            object,
            last_state: last.clone(),
            attempt,
            triggers,
            scope: Arc::clone(scope),
            caches: Arc::clone(caches),
            fencing_token: match claim {
                Some(claim) => Some(claim.token),
                None => self.fencing_token.as_ref().and_then(|token| token()),
            },
            read_your_writes: self.gate.is_some(),
        };
        let span = tracing::info_span!(
            "reconcile",
            controller = %self.name,
            key = ?key,
            attempt,
            trigger = %triggers,
        );
        let mut report = Report::start(&*self.observer, started);
        let (ran, waited) = self
            .call(ctx, (stop, scope), claim.map(|c| &c.cancel), batch)
            .instrument(span.clone())
            .await;
        let ended = Instant::now();
        let took = ended.saturating_duration_since(started);
        let outcome = span.in_scope(|| self.settle(handed, attempt, ran, took));
        if let Some(last) = last.filter(|_| outcome.succeeded()) {
            self.last_states.handed(key, &last);
        }
        report.finish(outcome, took);
        (ended, waited)
    }

    /// Runs the reconcile with panic catching, its timeout, the worker's
    /// `stop` and its shard's `handover` token. On a timeout or a handover
    /// the reconcile's `token` is cancelled before the future is dropped. If
    /// the reconcile waits, what the worker holds is released first (and
    /// `true` returned with the outcome).
    async fn call(
        &self,
        ctx: Context<O>,
        (stop, scope): (&CancellationToken, &Scope),
        handover: Option<&CancellationToken>,
        batch: &mut Batch<'_, O::Key, Triggers>,
    ) -> (Ran<R::Error>, bool) {
        if stop.is_cancelled() || handover.is_some_and(CancellationToken::is_cancelled) {
            return (Ran::Cancelled, false);
        }
        // Built inside the guarded future: a `reconcile` that panics before
        // its first `.await` is caught too.
        let reconcile = AssertUnwindSafe(async move { self.reconciler.reconcile(ctx).await });
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
        let deadline = self
            .timeout
            .and_then(|limit| Instant::now().checked_add(limit));
        let timer = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        let handed_over = async {
            match handover {
                Some(handover) => handover.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let ran = tokio::select! {
            biased;
            ran = &mut reconcile => finished(ran),
            () = stop.cancelled() => Ran::Cancelled,
            () = handed_over => {
                scope.cancel();
                Ran::Cancelled
            }
            () = timer => {
                scope.cancel();
                Ran::TimedOut
            }
        };
        (ran, true)
    }

    /// Acts on the outcome: forget or back off, requeue, log.
    /// A retry or requeue keeps the priority the key ran at.
    fn settle(
        &self,
        handed: &Handed<O::Key, Triggers>,
        attempt: u32,
        ran: Ran<R::Error>,
        took: Duration,
    ) -> Outcome {
        let queue = &self.sink.queue;
        let (key, priority) = (&handed.key, handed.priority);
        // A first attempt has no failures on record: nothing to forget (see
        // `RateLimiter::retries`), and a hash-map removal saved per reconcile.
        let forget = |key| {
            if attempt > 1 {
                queue.forget(key);
            }
        };
        match ran {
            Ran::Returned(Ok(Action::Done)) => {
                forget(key);
                tracing::debug!(?took, "reconciled");
                Outcome::Success
            }
            Ran::Returned(Ok(Action::Requeue)) => {
                self.sink
                    .push_backoff(key.clone(), Trigger::Requeue, priority);
                tracing::debug!(?took, "reconciled, requeue with backoff requested");
                Outcome::Requeue
            }
            Ran::Returned(Ok(Action::RequeueAfter(delay))) => {
                forget(key);
                let delay = delay.max(Action::MIN_REQUEUE_DELAY);
                self.sink
                    .push_after(key.clone(), Trigger::Requeue, delay, priority);
                tracing::debug!(?took, ?delay, "reconciled, requeue requested");
                Outcome::RequeueAfter
            }
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
                tracing::debug!("reconcile cancelled");
                Outcome::Cancelled
            }
        }
    }

    /// A reconcile returned `error`: retried, or not if terminal.
    fn failed(&self, key: &O::Key, priority: Priority, attempt: u32, error: &R::Error) -> Outcome {
        match self.reconciler.error_policy(error) {
            ErrorPolicy::Terminal => {
                if attempt > 1 {
                    self.sink.queue.forget(key);
                }
                tracing::error!(%error, "reconcile failed with a terminal error, not retrying");
                Outcome::TerminalError
            }
            ErrorPolicy::Retry => {
                self.retry(key, priority);
                tracing::warn!(%error, "reconcile failed, retrying with backoff");
                Outcome::Error
            }
        }
    }

    fn retry(&self, key: &O::Key, priority: Priority) {
        self.sink
            .push_backoff(key.clone(), Trigger::Retry, priority);
    }

    /// Runs the gate (read-your-writes) until `stop`.
    pub(super) async fn watch_writes(self: Arc<Self>, stop: CancellationToken) {
        if let Some(gate) = &self.gate {
            let revisions = self.caches.revisions().to_vec();
            gate.run(self.sink.queue.clone(), revisions, &*self.observer, stop)
                .await;
        }
    }

    /// Re-enqueues every cached primary key each (jittered) period.
    pub(super) async fn resync_every(self: Arc<Self>, period: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(crate::time::jittered(period, fastrand::f64())) => {}
            }
            super::external::enqueue_all(&self.sink, &self.store, Trigger::Resync);
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| String::from("non-string panic payload"))
}
