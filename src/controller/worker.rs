//! A worker: take a key, claim it, read the current object, reconcile, act
//! on the outcome, `done`. Panics and timeouts are caught here.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::call::{Stops, call, panic_message};
use super::context::Caches;
use super::gate::Gate;
use super::hot_keys::HotKeys;
use super::journal::{Facts, Journal};
use super::lag_gate::LagGate;
use super::last_states::LastStates;
use super::ownership::{Claim, Claimed};
use super::pace::Pace;
use super::reads::{Recording, Tracker};
use super::scope::{Scope, Writes};
use super::settle::Report;
use super::sink::Enqueue;
use super::spacer::Spacer;
use super::{Context, ControllerObserver, Outcome, Reconciler, Trigger, Triggers};
use crate::informer::Cache;
use crate::object::Object;
use crate::queue::{Batch, Handed};

/// What the workers share: one per controller run.
pub(super) struct Worker<O: Object, R> {
    pub(super) name: String,
    pub(super) store: Cache<O>,
    pub(super) reconciler: R,
    pub(super) sink: Enqueue<O::Key>,
    pub(super) caches: Arc<Caches>,
    pub(super) timeout: Option<Duration>,
    /// The longest delay an error's [`ErrorPolicy::RetryAfter`](super::ErrorPolicy) gets.
    pub(super) max_retry_after: Duration,
    pub(super) observer: Arc<dyn ControllerObserver>,
    /// How many workers share the queue.
    pub(super) workers: usize,
    /// Holds keys until the caches show their writes (read-your-writes on).
    pub(super) gate: Option<Arc<Gate<O::Key>>>,
    /// Deleted primary objects' last states, until reconciled.
    pub(super) last_states: Arc<LastStates<O>>,
    /// The last reconciles and failures.
    pub(super) journal: Journal<O::Key>,
    /// Holds reconciles while a cache lags (`hold_while_lagging`).
    pub(super) lag_gate: Option<LagGate>,
    /// Counts the reconciles that wrote, per key.
    pub(super) hot_keys: HotKeys<O::Key>,
    /// Holds hot keys after their reconciles (when spaced).
    pub(super) spacer: Option<Arc<Spacer<O::Key>>>,
    /// The records of what reconciles read of tracked sources (`reads`).
    pub(super) reads: Option<Tracker<O::Key>>,
    /// The controller's graceful stop: a worker waiting to be allowed to
    /// reconcile (a standby) stops waiting.
    pub(super) stopping: CancellationToken,
}

/// One worker task's own state, kept from one reconcile to the next.
struct Local<'q, K: crate::QueueKey> {
    /// The worker's token (a child of the controller's hard stop, so that
    /// watching it locks no shared node).
    stop: Arc<CancellationToken>,
    /// The current reconcile's scope, recycled when no context is left.
    scope: Arc<Scope>,
    /// The worker's copy of the caches, shared by its contexts.
    caches: Arc<Caches>,
    batch: Batch<'q, K, Triggers>,
    pace: Pace,
}

impl<O: Object, R: Reconciler<O>> Worker<O, R> {
    /// Processes keys until the queue shuts down or the hard stop (checked
    /// between runs of keys: a key handed out after it is cancelled
    /// unreconciled and given back).
    ///
    /// Keys come in batches (see `queue::Batch`): from a backlog, while
    /// reconciles are quick, up to a run of keys under one lock, ended
    /// together when the next run is taken; no run leaves another worker
    /// without a ready key (`spare`), and a reconcile that waits, or turns
    /// out slow, hands the rest back. A slow controller takes one key at a
    /// time.
    pub(super) async fn run(self: Arc<Self>, hard_stop: CancellationToken) {
        let stop = Arc::new(hard_stop.child_token());
        let mut local = Local {
            scope: Arc::new(Scope::new(Arc::clone(&stop), Arc::clone(&self.observer))),
            stop,
            caches: Arc::new(Caches::clone(&self.caches)),
            batch: self.sink.queue.batch(),
            pace: Pace::new(self.workers),
        };
        // Reconciles that finish without waiting never yield to tokio:
        // spend the task's budget so a backlog cannot monopolise a thread.
        loop {
            tokio::task::consume_budget().await;
            let Some((handed, started)) = self.take(&mut local).await else {
                return;
            };
            match self.sink.claim(&handed.key) {
                Claimed::Run(claim) => self.reconcile(&mut local, handed, claim, started).await,
                Claimed::Skip => self.skip(&mut local, handed.key, started),
                Claimed::Wait => self.keep(&mut local, handed),
            }
        }
    }

    /// Reconciles `handed` under `claim` (held until settled, so that the
    /// slot's handover waits for it), then ends the key or has the gate
    /// hold it.
    async fn reconcile(
        self: &Arc<Self>,
        local: &mut Local<'_, O::Key>,
        handed: Handed<O::Key, Triggers>,
        claim: Option<Claim>,
        started: Instant,
    ) {
        // User callbacks run around the reconcile (error policy, observers,
        // the error's Display): a panic in any of them must not end the
        // worker nor strand its key. (The queue catches its observer's
        // panics itself.)
        let processed = AssertUnwindSafe(self.process(local, &handed, claim.as_ref(), started));
        let (ended, waited) = match processed.catch_unwind().await {
            Ok(done) => done,
            Err(panic) => self.recover(&handed, &*panic),
        };
        drop(claim);
        let Writes { landed, unsure } = local.scope.take_writes();
        let wrote = local.scope.take_wrote();
        Scope::recycle(&mut local.scope);
        let spacing = self.heat(&handed, wrote, ended);
        let key = if unsure.is_empty() {
            self.end_or_hold(handed.key, landed, spacing, ended, local.caches.revisions())
        } else {
            let revisions = local.caches.revisions();
            self.hold_for_heads(handed.key, landed, unsure, spacing, ended, revisions);
            None
        };
        local
            .pace
            .finished(&mut local.batch, key, started, ended, waited);
    }

    /// The key to end now, or `None` while it is spaced (hot) or held until
    /// the caches show `writes` (read-your-writes).
    pub(super) fn end_or_hold(
        &self,
        key: O::Key,
        writes: Vec<(usize, crate::object::Revision)>,
        spacing: Option<Duration>,
        ended: Instant,
        revisions: &[tokio::sync::watch::Receiver<crate::object::Revision>],
    ) -> Option<O::Key> {
        match (spacing, &self.spacer) {
            // Read-your-writes waits after the spacing, if still needed.
            (Some(spacing), Some(spacer)) => {
                let until = crate::time::deadline(ended, spacing);
                spacer.hold(key, writes, until)
            }
            _ => self.hold_for_writes(key, writes, revisions, ended),
        }
    }

    /// After a reconcile of `handed` that `wrote`: whether its key is hot,
    /// and how long to hold it (hot and spaced).
    fn heat(
        &self,
        handed: &Handed<O::Key, Triggers>,
        wrote: bool,
        now: Instant,
    ) -> Option<std::time::Duration> {
        if !wrote {
            return None;
        }
        let heat = self.hot_keys.wrote(&handed.key, handed.payload, now);
        if heat.began {
            self.observer.hot_key();
        }
        heat.spacing
    }

    /// The key to end now, or `None` while the gate holds it until the
    /// caches show `writes` (read-your-writes on).
    fn hold_for_writes(
        &self,
        key: O::Key,
        writes: Vec<(usize, crate::object::Revision)>,
        revisions: &[tokio::sync::watch::Receiver<crate::object::Revision>],
        now: Instant,
    ) -> Option<O::Key> {
        match &self.gate {
            Some(gate) => gate.hold(key, writes, revisions, now),
            None => Some(key),
        }
    }

    /// Runs the spacer (hot keys spaced) until `stop`: a key whose spacing
    /// ended goes to the gate, or is ended.
    pub(super) async fn space_keys(self: Arc<Self>, stop: CancellationToken) {
        if let Some(spacer) = &self.spacer {
            let revisions = self.caches.revisions();
            let end = |key: O::Key, writes| {
                if let Some(key) = self.hold_for_writes(key, writes, revisions, Instant::now()) {
                    let _ = self.sink.queue.done(&key);
                }
            };
            spacer.run(end, stop).await;
        }
    }

    /// Ends a key of a shard this replica does not own (any more) without
    /// reconciling it: its owner reconciles it (a deleted one too: every
    /// replica keeps the deletions for the shards it gains), so its last
    /// state is not kept here either.
    fn skip(&self, local: &mut Local<'_, O::Key>, key: O::Key, started: Instant) {
        tracing::debug!(controller = %self.name, ?key, "skipping a key of a shard not owned");
        self.sink.queue.forget(&key);
        self.last_states.forget(&key);
        if let Some(reads) = &self.reads {
            reads.forget(&key);
        }
        let now = Instant::now();
        local
            .pace
            .finished(&mut local.batch, Some(key), started, now, false);
    }

    /// Puts back a key this replica may not reconcile yet (a standby's),
    /// with the rest of its run, for when it may.
    fn keep(&self, local: &mut Local<'_, O::Key>, handed: Handed<O::Key, Triggers>) {
        self.sink
            .give_back(handed.key.clone(), handed.priority, handed.payload);
        local.batch.finish(handed.key, Duration::ZERO);
        local.batch.release();
    }

    /// The next key and when its processing starts: from the batch, or
    /// waiting on the queue (and first, for a standby, until it may
    /// reconcile); `None` once the queue is shut down or the controller
    /// stops.
    async fn take(
        &self,
        local: &mut Local<'_, O::Key>,
    ) -> Option<(Handed<O::Key, Triggers>, Instant)> {
        loop {
            let pace = &mut local.pace;
            let max = pace.run();
            // Ending the run and taking the next starts afresh, quick.
            let refill = local.batch.will_refill();
            pace.quick |= refill;
            // Stopped hard: every key would be cancelled and given back. Once
            // per run (the token's check takes a lock), not per key.
            if refill && local.stop.is_cancelled() {
                return None;
            }
            if let Some(gate) = self
                .lag_gate
                .as_ref()
                .filter(|gate| gate.lagging().is_some())
            {
                // Ends the run's keys before the wait, holding none in flight.
                local.batch.release();
                gate.until_current(&local.stop, &self.stopping).await?;
            }
            if let Some(handed) = local.batch.next(pace.last_end, max, pace.spare) {
                return Some((handed, pace.last_end));
            }
            if local.stop.is_cancelled() {
                return None;
            }
            self.until_active(&local.stop).await?;
            match AssertUnwindSafe(self.sink.queue.get_handed())
                .catch_unwind()
                .await
            {
                // Came while a cache lags: back to the queue, and wait.
                Ok(Some(handed))
                    if self
                        .lag_gate
                        .as_ref()
                        .is_some_and(|g| g.lagging().is_some()) =>
                {
                    self.keep(local, handed);
                }
                Ok(taken) => return taken.map(|handed| (handed, Instant::now())),
                Err(panic) => {
                    tracing::error!(controller = %self.name, panic = %panic_message(&*panic), "taking a key panicked");
                }
            }
        }
    }

    /// Waits until this replica may reconcile (at once, unless a standby);
    /// `None` when the controller stops first.
    async fn until_active(&self, stop: &CancellationToken) -> Option<()> {
        let Some(ownership) = self
            .sink
            .ownership
            .as_ref()
            .filter(|_| !cfg!(tend_without = "shard_filter"))
        else {
            return Some(());
        };
        tokio::select! {
            biased;
            () = stop.cancelled() => None,
            () = self.stopping.cancelled() => None,
            () = ownership.active() => Some(()),
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

    /// Reconciles `handed` (taken at `started`); returns when it ended and
    /// whether the reconcile waited.
    async fn process(
        &self,
        local: &mut Local<'_, O::Key>,
        handed: &Handed<O::Key, Triggers>,
        claim: Option<&Claim>,
        started: Instant,
    ) -> (Instant, bool) {
        let key = &handed.key;
        let attempt = self.sink.queue.retries(key).saturating_add(1);
        let ctx = self.context(local, handed, attempt, claim);
        let (last, triggers) = (ctx.last_state.clone(), ctx.triggers);
        let reading = ctx.recording.clone().map(|r| (r, ctx.object.is_some()));
        let span = self.span(key, attempt, ctx.triggers);
        let latency = self.sink.queue.waited(started, handed.since);
        self.observer.reconcile_latency(triggers, latency);
        let mut report = Report::start(&*self.observer, started);
        let stops = Stops {
            worker: &local.stop,
            handover: claim.map(|claim| &claim.cancel),
            scope: &local.scope,
            timeout: self.timeout,
        };
        let called = call(&self.reconciler, ctx, stops, &mut local.batch);
        // Not wrapped while nothing listens: the wrapper moves the whole
        // future once more.
        let (ran, waited) = match span.is_disabled() {
            true => called.await,
            false => called.instrument(span.clone()).await,
        };
        let ended = Instant::now();
        let took = ended.saturating_duration_since(started);
        let failure = self.failure(&ran);
        let outcome = span.in_scope(|| self.settle(handed, attempt, ran, took));
        self.remember_reads(reading, outcome);
        self.journal.record(
            key,
            Facts {
                triggers,
                attempt,
                waited: latency,
                started,
                took,
                outcome,
                failure,
            },
        );
        // Done with the last state: a success, or a terminal error (no
        // retry, change or resync runs a deleted key again).
        let done = outcome.succeeded() || outcome == Outcome::TerminalError;
        if let Some(last) = last.filter(|_| done) {
            self.last_states.handed(key, &last);
        }
        report.finish(outcome, took);
        (ended, waited)
    }

    /// A reconcile's span: its controller, key, attempt and triggers.
    fn span(&self, key: &O::Key, attempt: u32, triggers: Triggers) -> tracing::Span {
        if cfg!(tend_without = "spans") {
            return tracing::Span::none();
        }
        tracing::info_span!(
            "reconcile",
            controller = %self.name,
            key = ?key,
            attempt,
            trigger = %triggers,
        )
    }

    /// Keeps what a reconcile read (recorded with whether it found its
    /// object) as its key's dependencies, or forgets them.
    fn remember_reads(&self, reading: Option<(Arc<Recording<O::Key>>, bool)>, outcome: Outcome) {
        if let (Some(reads), Some((recording, existed))) = (&self.reads, reading) {
            reads.settle(&recording, existed, outcome);
        }
    }

    /// The context of a reconcile of `handed`, its `attempt`.
    fn context(
        &self,
        local: &Local<'_, O::Key>,
        handed: &Handed<O::Key, Triggers>,
        attempt: u32,
        claim: Option<&Claim>,
    ) -> Context<O> {
        let key = &handed.key;
        // After a failure, whatever queued this run (the retry timer, or a
        // change that came first), it is also a retry; after a backoff
        // requeue, it is that.
        let triggers = if attempt > 1 && !handed.payload.contains(Trigger::Requeue) {
            handed.payload.with(Trigger::Retry)
        } else {
            handed.payload
        };
        let object = self.store.get(key);
        let last_state = match object {
            None => self.last_states.get(key),
            Some(_) => None,
        };
        Context {
            key: key.clone(),
            object,
            last_state,
            attempt,
            triggers,
            scope: Arc::clone(&local.scope),
            caches: Arc::clone(&local.caches),
            fencing_token: claim.map(|claim| claim.token),
            read_your_writes: self.gate.is_some(),
            recording: self.reads.as_ref().map(|reads| reads.start(key)),
            // Taken whatever the triggers say: a cause must not outlive the
            // wake it named, even one whose trigger a timer's merge dropped.
            read_causes: self.reads.as_ref().map_or_else(Vec::new, |r| r.causes(key)),
        }
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
