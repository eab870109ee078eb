//! The informer's engine: a state machine (list → watch → back off → …)
//! driven in the caller's task, one small function per transition.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::backoff::{Backoff, jittered};
use super::dispatch::{FLUSH_EVERY, FlushOnUnwind};
use super::stats::Counters;
use super::tombstones::Tombstones;
use crate::error::error_chain;
use crate::object::{Object, Revision};
use crate::source::{Change, SourceError, WatchStream};

/// How a run of watch changes ended.
enum RunEnd<O: Object> {
    /// Nothing more is ready now.
    Drained,
    /// More is (or may soon be) ready: the run was cut by its length or by
    /// tokio's budget.
    More,
    /// The stream ended or failed (or an item the watch cannot go on with).
    Over(Option<Result<Change<O>, SourceError>>),
}

/// Changes applied in one go when the stream has them ready, before the loop
/// looks at cancellation and timers again.
const BATCH: usize = 1024;

/// Where the informer is.
enum State<O: Object> {
    /// Must list.
    List,
    /// Must open a watch from the last seen revision (`resume`: not the
    /// first watch after a list).
    Connect { resume: bool },
    /// Watching; `progressed` once the stream delivered something.
    Watching {
        stream: WatchStream<O>,
        progressed: bool,
    },
    /// Waiting after a failure.
    Backoff { until: Instant, then: Retry },
}

/// What to do after a backoff.
#[derive(Debug, Clone, Copy)]
enum Retry {
    List,
    Connect,
}

/// One run of an informer.
pub(super) struct Runner<'a, O: Object> {
    pub(super) shared: &'a Shared<O>,
    /// The latest revision seen: where the next watch starts.
    pub(super) revision: Revision,
    pub(super) backoff: Backoff,
    /// Consecutive watches that failed without delivering anything.
    pub(super) failures: u32,
    /// No watch has delivered anything since the last list: an "expired"
    /// now means the source expires faster than we list, so back off.
    pub(super) fresh_list: bool,
    pub(super) tombstones: Tombstones<O::Key>,
    pub(super) rng: fastrand::Rng,
    pub(super) resync_at: Option<Instant>,
    pub(super) relist_at: Option<Instant>,
    /// The last run of watch events ended with a settled flush: buffering
    /// handlers may have kept keys back.
    pub(super) held: bool,
    /// Where the scope was when the list under way began.
    pub(super) listing: Option<Listing>,
    /// Objects the run of watch events under way replaced (the first few):
    /// freed once the run's keys are queued and this task has yielded, so
    /// the reconciles they wake (next on this thread) do not wait for the
    /// frees (an object of nested maps is thousands of instructions to
    /// free). A run that ends the watch frees them at once.
    pub(super) retired: Vec<Arc<O>>,
}

impl<'a, O: Object> Runner<'a, O> {
    pub(super) fn new(shared: &'a Shared<O>) -> Self {
        let options = &shared.options;
        Self {
            shared,
            revision: Revision::ZERO,
            backoff: Backoff::new(
                options.backoff_initial,
                options.backoff_max,
                options.backoff_reset_after,
            ),
            failures: 0,
            fresh_list: false,
            tombstones: Tombstones::new(),
            rng: fastrand::Rng::new(),
            resync_at: None,
            relist_at: None,
            held: false,
            listing: None,
            retired: Vec::new(),
        }
    }

    /// Runs until `cancel` fires.
    pub(super) async fn run(mut self, cancel: CancellationToken) {
        let mut state = State::List;
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let timer = sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut scope = self.shared.scope.as_ref().map(|scoped| Followed {
            widened: scoped.attached.widened.clone(),
            narrowed: scoped.attached.narrowed.clone(),
        });
        loop {
            let deadline = self.next_deadline(&state);
            if let Some(deadline) = deadline
                && timer.deadline() != deadline
            {
                timer.as_mut().reset(deadline);
            }
            // A list applies the scope as it is when the list ends.
            let listing = matches!(state, State::List);
            tokio::select! {
                biased;
                () = &mut cancelled => break,
                () = &mut timer, if deadline.is_some() => self.on_timer(&mut state),
                change = scope_changed(&mut scope), if !listing => self.on_scope(change, &mut state),
                next = self.advance(&mut state) => {
                    if let Some(next) = next {
                        state = next;
                    }
                }
            }
        }
        self.shared.subscribers.lock().flush();
        tracing::debug!("informer stopped");
    }

    /// The next timer deadline; timers only interrupt watching and backing
    /// off (an interrupted list or connect would have to start over). The
    /// relist timer also cuts a backoff short: a list is a fresh start.
    fn next_deadline(&self, state: &State<O>) -> Option<Instant> {
        match state {
            State::Watching { .. } | State::Backoff { .. } => {
                match (self.resync_at, self.relist_at) {
                    (Some(resync), Some(relist)) => Some(resync.min(relist)),
                    (resync, relist) => resync.or(relist),
                }
            }
            State::List | State::Connect { .. } => None,
        }
    }

    fn on_timer(&mut self, state: &mut State<O>) {
        let now = Instant::now();
        if self.resync_at.is_some_and(|at| at <= now) {
            self.resync();
            self.resync_at = self
                .shared
                .options
                .resync
                .map(|period| crate::time::deadline(now, jittered(period, &mut self.rng)));
        }
        if self.relist_at.is_some_and(|at| at <= now) {
            tracing::debug!("relist timer fired");
            self.relist_at = None;
            *state = State::List;
        }
    }

    /// The scope grew (list again, unless a list since filled it) or
    /// shrank (drop what it no longer keeps, and watch again: a source
    /// that selects by the scope then sends less).
    fn on_scope(&mut self, change: ScopeChange, state: &mut State<O>) {
        match change {
            ScopeChange::Widened(generation) => {
                let filled = (self.shared.scope.as_ref())
                    .is_some_and(|scoped| *scoped.attached.filled.borrow() >= generation);
                if !filled {
                    tracing::debug!(generation, "the scope grew; listing again");
                    *state = State::List;
                }
            }
            ScopeChange::Narrowed => {
                self.evict();
                if matches!(state, State::Watching { .. }) {
                    *state = State::Connect { resume: true };
                }
            }
        }
    }

    /// Runs the current state's step; `Some` is the next state.
    async fn advance(&mut self, state: &mut State<O>) -> Option<State<O>> {
        match state {
            State::List => Some(self.list().await),
            State::Connect { resume } => Some(self.connect(*resume).await),
            State::Backoff { until, then } => {
                sleep_until(*until).await;
                Some(match then {
                    Retry::List => State::List,
                    Retry::Connect => State::Connect { resume: true },
                })
            }
            State::Watching { stream, progressed } => self.watch(stream, progressed).await,
        }
    }

    async fn list(&mut self) -> State<O> {
        let counters = &self.shared.counters;
        Counters::bump(&counters.lists);
        let initial = !self.shared.store.is_synced();
        if !initial {
            Counters::bump(&counters.relists);
        }
        self.listing = self.begin_scoped_list();
        let listed = match &self.shared.transform {
            Some(transform) => self.shared.source.list_transformed(&**transform).await,
            None => self.shared.source.list().await,
        };
        match listed {
            Ok(snapshot) => {
                counters.progressed(Instant::now());
                let sure = self.apply_list(snapshot, initial);
                self.backoff.healthy();
                self.failures = 0;
                self.fresh_list = true;
                if sure {
                    State::Connect { resume: false }
                } else {
                    State::List
                }
            }
            Err(error) => {
                counters.failed(Instant::now());
                let delay = self.backoff.next_delay();
                tracing::warn!(error = %error_chain(&error), ?delay, "list failed; backing off");
                State::Backoff {
                    until: crate::time::deadline(Instant::now(), delay),
                    then: Retry::List,
                }
            }
        }
    }

    async fn connect(&mut self, resume: bool) -> State<O> {
        match self.shared.source.watch(self.revision).await {
            Ok(stream) => {
                self.shared.counters.succeeded();
                if resume {
                    Counters::bump(&self.shared.counters.watch_restarts);
                }
                tracing::debug!(revision = %self.revision, resume, "watching");
                self.backoff.healthy();
                self.tombstones.clear();
                State::Watching {
                    stream,
                    progressed: false,
                }
            }
            Err(error) => self.watch_failed(&error),
        }
    }

    /// Applies the next run of changes. Buffering handlers are flushed every
    /// [`FLUSH_EVERY`] events and at the end of the run; when the input goes
    /// on (the run was cut by its length or by tokio's budget), the flush is
    /// a settled one, which may hold the key of the last event back once (a
    /// burst of changes to one key cut there would be reconciled at a
    /// passing version, then again). Before waiting on the stream, or when
    /// the watch ends, everything is flushed.
    async fn watch(
        &mut self,
        stream: &mut WatchStream<O>,
        progressed: &mut bool,
    ) -> Option<State<O>> {
        let first = match stream.next().now_or_never() {
            Some(first) => first,
            None => {
                self.flush_all();
                stream.next().await
            }
        };
        let Some(Ok(change)) = first else {
            self.flush_all();
            return Some(self.watch_over(first, *progressed));
        };
        *progressed = true;
        self.shared.counters.progressed(Instant::now());
        self.failures = 0;
        self.fresh_list = false;
        let end = self.apply_run(change, stream);
        self.shared.store.publish(self.revision);
        self.held = matches!(end, RunEnd::More);
        {
            let mut subscribers = self.shared.subscribers.lock();
            if self.held {
                subscribers.flush_settled();
            } else {
                subscribers.flush();
            }
        }
        if let RunEnd::Over(item) = end {
            self.retired.clear();
            return Some(self.watch_over(item, true));
        }
        if !self.retired.is_empty() {
            // Freed once the reconciles this run woke (next on this thread)
            // have started; freed too if this future is dropped meanwhile.
            let mut retired = std::mem::take(&mut self.retired);
            tokio::task::yield_now().await;
            retired.clear();
            self.retired = retired;
        }
        // Let other tasks on this thread run while catching up.
        tokio::task::consume_budget().await;
        None
    }

    /// Applies `first` and up to `BATCH - 1` changes ready after it; says
    /// how the run ended.
    fn apply_run(&mut self, first: Change<O>, stream: &mut WatchStream<O>) -> RunEnd<O> {
        // A panic part-way still hands over what handlers gathered.
        let _flush = FlushOnUnwind(&self.shared.subscribers);
        self.apply(first);
        for n in 1..BATCH {
            match stream.next().now_or_never() {
                // Not ready: drained, unless for want of tokio's budget.
                None if tokio::task::coop::has_budget_remaining() => return RunEnd::Drained,
                None => return RunEnd::More,
                Some(Some(Ok(change))) => self.apply(change),
                Some(other) => return RunEnd::Over(other),
            }
            if n % FLUSH_EVERY == 0 {
                self.shared.subscribers.lock().flush_settled();
            }
        }
        RunEnd::More
    }

    /// Tells buffering handlers to act on everything they gathered, if the
    /// last run ended with a settled flush (that may have kept some back).
    fn flush_all(&mut self) {
        if std::mem::take(&mut self.held) {
            self.shared.subscribers.lock().flush();
        }
    }

    /// The stream failed or ended.
    fn watch_over(
        &mut self,
        item: Option<Result<Change<O>, SourceError>>,
        progressed: bool,
    ) -> State<O> {
        match item {
            None if progressed => {
                tracing::debug!(revision = %self.revision, "watch ended; resuming");
                State::Connect { resume: true }
            }
            None => self.watch_failed(&SourceError::unavailable(
                "watch ended without delivering anything",
            )),
            Some(Err(error)) => self.watch_failed(&error),
            Some(Ok(_)) => State::Connect { resume: true },
        }
    }

    fn watch_failed(&mut self, error: &SourceError) -> State<O> {
        self.shared.counters.failed(Instant::now());
        if error.is_expired() && !self.fresh_list {
            tracing::info!(error = %error_chain(error), "watch expired; relisting");
            return State::List;
        }
        if error.is_expired() {
            let delay = self.backoff.next_delay();
            tracing::warn!(error = %error_chain(error), ?delay, "watch expired right after a list; backing off before relisting");
            return State::Backoff {
                until: crate::time::deadline(Instant::now(), delay),
                then: Retry::List,
            };
        }
        self.failures = self.failures.saturating_add(1);
        let then = if self.failures >= self.shared.options.max_watch_failures.get() {
            self.failures = 0;
            Retry::List
        } else {
            Retry::Connect
        };
        let delay = self.backoff.next_delay();
        tracing::warn!(error = %error_chain(error), ?delay, relist = matches!(then, Retry::List), "watch failed; backing off");
        State::Backoff {
            until: crate::time::deadline(Instant::now(), delay),
            then,
        }
    }
}

/// The scope's changes, as one informer follows them.
struct Followed {
    widened: watch::Receiver<u64>,
    narrowed: watch::Receiver<u64>,
}

/// Where a scoped informer's scope was when a list began.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listing {
    /// The growth: a source that filters as it lists (by a label) lists
    /// at least this one.
    pub(super) growth: u64,
    /// The shrinks: one during the list means an object missing from it
    /// may have been left out by its selector rather than deleted.
    pub(super) narrowed: u64,
}

/// How the scope changed.
#[derive(Debug, Clone, Copy)]
enum ScopeChange {
    /// It grew; the growth's number.
    Widened(u64),
    Narrowed,
}

/// Resolves when the scope changes (never without a scope).
async fn scope_changed(followed: &mut Option<Followed>) -> ScopeChange {
    let Some(Followed { widened, narrowed }) = followed else {
        return std::future::pending().await;
    };
    // The senders live as long as the scope the informer holds.
    tokio::select! {
        Ok(()) = widened.changed() => ScopeChange::Widened(*widened.borrow_and_update()),
        Ok(()) = narrowed.changed() => {
            narrowed.borrow_and_update();
            ScopeChange::Narrowed
        }
        else => std::future::pending().await,
    }
}
