//! The work queue: a deduplicating, rate-limited, prioritised queue of keys.
//!
//! Keys, not objects, travel through it: a worker takes a key and reads the
//! latest object from the cache, so however many times a key was added, one
//! reconcile sees the current state.
//!
//! # Invariants
//!
//! 1. A key is at most once in the queue. Adding a ready key is a no-op,
//!    except that a higher priority or an earlier deadline wins.
//! 2. A key is handed to at most one worker at a time. Adding a key while it
//!    is processed marks it dirty; it is queued again when the worker calls
//!    [`done`](WorkQueue::done).
//! 3. No added key is lost: until shutdown, every add is followed by a
//!    [`get`](WorkQueue::get) of that key.
//! 4. Rate limiting delays, never drops. [`forget`](WorkQueue::forget) resets
//!    a key's failure count.
//! 5. Shutdown wakes every waiting worker; with drain, it waits for in-flight
//!    keys.
//!
//! Each key's pending state carries a [`Payload`] (`payload.rs`), merged by
//! every add that lands on it and handed out with the key; a timer's counts
//! only if it fires; a key handed back unstarted keeps its own.
//!
//! # Structure and lock order
//!
//! A synchronous core (`core.rs`: plain data, no tokio) sits behind one mutex
//! (through the loom shim in `sync.rs`); this file is the async shell that
//! reads tokio's clock, wakes waiters through [`Notify`] and calls the
//! observer. Three user callbacks run under the core's mutex, so they must
//! not call back into the queue: [`QueueObserver::depth`] (so that depth
//! reports arrive in order), [`RateLimiter::when`] and [`Payload::merge`]
//! (with the key's own `Hash`, `Eq` and `Clone`). Lock order: the core's
//! mutex, then the rate limiter's own lock. No lock is held across an
//! `.await`.
//!
//! Every decision about whom to wake and whether to sleep is a synchronous
//! step of the core (`wake.rs`) run under the lock; this file only does
//! what the step returned, after the lock, and registers for a wake-up
//! before a look that may sleep. loom checks the core (`loom_tests.rs`) and
//! those steps, as this file and `batch.rs` call them (`loom_wakeups.rs`).

mod adds;
mod batch;
mod builder;
mod core;
mod groups;
mod lanes;
mod levels;
#[cfg(all(test, tend_loom))]
mod loom_bell;
#[cfg(all(test, tend_loom))]
mod loom_tests;
#[cfg(all(test, tend_loom))]
mod loom_wakeups;
mod observer;
mod payload;
mod priority;
pub mod rate_limit;
mod shrink;
mod slot;
mod stamp;
#[cfg(all(test, not(tend_loom)))]
mod tests;
mod wake;

use std::fmt;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub(crate) use self::batch::Batch;
pub(crate) use self::core::Debounce;
pub(crate) use self::core::Handed;
use self::core::{Added, Core, Scheduled};
pub(crate) use self::groups::{group_fn, group_hash};
pub(crate) use self::levels::GroupFn;
use self::rate_limit::RateLimiter;
pub(crate) use self::slot::slot_size;
use self::stamp::{Epoch, Stamp};
use self::wake::{Look, Ring, Signals, Watching};
pub(crate) use crate::key::QueueKey;
use crate::sync::{Mutex, lock};

pub use self::builder::WorkQueueBuilder;
pub use self::observer::{InFlightKey, QueueObserver, QueueStats};
pub use self::payload::Payload;
pub use self::priority::Priority;

/// When an [`enqueue`](WorkQueue::enqueue)d key becomes ready.
///
/// ```
/// use std::time::Duration;
/// use tend::{Priority, When, WorkQueue};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let queue: WorkQueue<&str> = WorkQueue::new();
/// queue.enqueue("later", When::After(Duration::from_secs(5)), Priority::NORMAL, ());
/// queue.enqueue("now", When::Now, Priority::NORMAL, ());
/// assert_eq!(queue.get().await, Some("now"));
/// queue.done(&"now").unwrap();
/// assert_eq!(queue.get().await, Some("later")); // the paused clock jumps 5 s
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum When {
    /// At once.
    Now,
    /// After this long (zero is at once).
    After(Duration),
    /// After the rate limiter's delay for the key, at least `floor`,
    /// recording one more failure; a key already pending stays as it is
    /// (see [`add_rate_limited`](WorkQueue::add_rate_limited)).
    Backoff {
        /// The shortest delay, whatever the rate limiter says.
        floor: Duration,
    },
    /// After this long instead of the rate limiter's delay, still recording
    /// one more failure with it (a retry whose error said when: a
    /// `Retry-After`); a key already pending stays as it is, as with
    /// [`Backoff`](When::Backoff).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tend::{Priority, When, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let queue: WorkQueue<&str> = WorkQueue::new();
    /// let later = When::RetryAfter(Duration::from_secs(30)); // the server said so
    /// queue.enqueue("web", later, Priority::NORMAL, ());
    /// assert_eq!(queue.retries(&"web"), 1); // a failure all the same
    /// tokio::time::advance(Duration::from_secs(29)).await;
    /// assert_eq!(queue.len(), 0);
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(queue.get().await, Some("web"));
    /// # }
    /// ```
    RetryAfter(Duration),
}

/// One add of a run given to [`WorkQueue::add_many`].
#[derive(Debug, Clone)]
pub(crate) struct Add<K, T> {
    pub(crate) key: K,
    pub(crate) priority: Priority,
    pub(crate) payload: T,
    /// A change event: debounced if the queue debounces, else at once.
    pub(crate) debounced: bool,
}

/// A retry's delay, from the rate limiter's answer.
#[derive(Debug, Clone, Copy)]
enum Backoff {
    /// The rate limiter's delay, at least this long.
    Floor(Duration),
    /// This delay; the rate limiter's is not used.
    Instead(Duration),
}

/// How long a retry waits when its rate limiter panicked: long enough not
/// to spin, short enough that the key is soon retried.
const LIMITER_PANIC_DELAY: Duration = Duration::from_secs(1);

/// [`WorkQueue::done`] was called for a key no worker holds.
///
/// ```
/// use tend::WorkQueue;
///
/// let queue: WorkQueue<&str> = WorkQueue::new();
/// queue.add("web");
/// let error = queue.done(&"web").unwrap_err(); // queued, but no worker took it
/// assert_eq!(error.key, "\"web\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {key} is not being processed")]
#[non_exhaustive]
pub struct DoneError {
    /// The key, formatted with `Debug`.
    pub key: String,
}

/// A deduplicating, rate-limited, prioritised queue of keys, shared by the
/// event handlers that add keys and the workers that process them.
///
/// Cloning gives another handle to the same queue.
///
/// Each key may carry a [`Payload`] `T`, merged by every add that lands on
/// it and handed out with it ([`enqueue`](Self::enqueue),
/// [`get_with_payload`](Self::get_with_payload)); a controller's queue
/// carries each key's [`Triggers`](crate::controller::Triggers). A queue
/// built with [`new`](Self::new) or [`builder`](Self::builder) carries none
/// (`()`); [`WorkQueueBuilder::payload`] chooses one.
///
/// # Examples
///
/// ```
/// use tend::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tend::DoneError> {
/// let queue = WorkQueue::new();
/// queue.add("web");
/// queue.add("web"); // deduplicated
/// assert_eq!(queue.len(), 1);
///
/// let key = queue.get().await.unwrap();
/// queue.add("web"); // processing: marked dirty, queued again after `done`
/// queue.done(&key)?;
/// assert_eq!(queue.len(), 1);
/// # Ok(()) }
/// ```
pub struct WorkQueue<K, T = ()> {
    shared: Arc<Shared<K, T>>,
}

struct Shared<K, T> {
    name: String,
    core: Mutex<Core<K, T>>,
    /// Workers wait on `ready`, `shutdown_with_drain` on `drained`.
    signals: Signals<Notify>,
    limiter: Box<dyn RateLimiter<K>>,
    observer: Arc<dyn QueueObserver>,
    /// The groups whose ready keys are exported, by label and hash.
    metered: Vec<(String, u64)>,
    /// Where the core's compact timestamps count from.
    epoch: Epoch,
}

impl<K: QueueKey> WorkQueue<K> {
    /// A queue with the default rate limiter
    /// ([`default_rate_limiter`](crate::rate_limit::default_rate_limiter)),
    /// no observer and a 10 s maximum wait for low priorities.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configures a queue.
    pub fn builder() -> WorkQueueBuilder<K> {
        WorkQueueBuilder::new()
    }
}

impl<K: QueueKey, T: Payload> WorkQueue<K, T> {
    /// The queue's name, used in logs and metric labels.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Adds `key` at [`Priority::NORMAL`]. See [`add_prioritized`](Self::add_prioritized).
    pub fn add(&self, key: K) {
        self.add_prioritized(key, Priority::NORMAL);
    }

    /// Adds `key` to be processed as soon as a worker is free.
    ///
    /// A key already ready stays once in the queue (at the higher of the two
    /// priorities); a key being processed is queued again when its worker
    /// calls [`done`](Self::done); a pending timer for the key is cancelled
    /// (now is sooner). After shutdown the key is dropped.
    pub fn add_prioritized(&self, key: K, priority: Priority) {
        self.enqueue(key, When::Now, priority, T::default());
    }

    /// Adds `key` after `delay`. If the key is already due sooner (ready,
    /// dirty, or scheduled earlier) nothing changes; if it is scheduled later,
    /// the earlier deadline wins. A zero delay is an immediate
    /// [`add`](Self::add). Timed keys are queued at [`Priority::NORMAL`].
    pub fn add_after(&self, key: K, delay: Duration) {
        self.enqueue(key, When::After(delay), Priority::NORMAL, T::default());
    }

    /// The one way into the queue, which every other add takes: `key`
    /// becomes ready when `when` says, at `priority` (or the higher priority
    /// it is pending at), with `payload` merged into what its next hand-out
    /// carries (a timer's payload counts only if that timer makes the key
    /// ready; see [`Payload`]). Otherwise as [`add_prioritized`](Self::add_prioritized)
    /// ([`When::Now`]), [`add_after`](Self::add_after) ([`When::After`]; a
    /// timer due sooner stays, at the higher priority) and
    /// [`add_rate_limited`](Self::add_rate_limited) ([`When::Backoff`]: a
    /// key already pending only gets the payload).
    pub fn enqueue(&self, key: K, when: When, priority: Priority, payload: T) {
        match when {
            When::Now => {
                let added = self.with_core(|core| core.add(key, priority, payload, || self.now()));
                self.after_add(added);
            }
            When::After(delay) => {
                let now = self.now();
                let scheduled = self.with_core(|core| {
                    core.add_after(key, now.after(delay), priority, payload, now)
                });
                self.after_schedule(scheduled);
            }
            When::Backoff { floor } => {
                self.enqueue_backoff(key, Backoff::Floor(floor), priority, payload);
            }
            When::RetryAfter(delay) => {
                self.enqueue_backoff(key, Backoff::Instead(delay), priority, payload);
            }
        }
    }

    /// Adds each key at once, or debounced (see [`Add`]), under one lock:
    /// for handlers that gather a run of events. The iterator runs under
    /// the lock: it must not call user code.
    pub(crate) fn add_many(&self, keys: impl IntoIterator<Item = Add<K, T>>) {
        let many = self.with_core(|core| core.add_many(keys, || self.now()));
        self.shared.signals.wake(many.wake);
        for _ in 0..many.added {
            self.report(|o| o.added());
        }
    }

    /// Adds `key` after the delay its rate limiter gives, recording one more
    /// failure for it.
    ///
    /// A key already pending (ready, scheduled or dirty) is left as it is and
    /// the rate limiter is not asked, so a deduplicated add never spends a
    /// token of a shared bucket nor counts as a failure.
    ///
    /// A rate limiter that panics costs only this retry's timing: the key
    /// waits a fixed 1 s instead, the panic is logged at error level and
    /// reported to [`QueueObserver::limiter_panicked`]. (The same holds for
    /// [`forget`](Self::forget) and [`retries`](Self::retries), which then
    /// does as if none were on record.)
    pub fn add_rate_limited(&self, key: K) {
        self.enqueue(
            key,
            When::Backoff {
                floor: Duration::ZERO,
            },
            Priority::NORMAL,
            T::default(),
        );
    }

    /// [`When::Backoff`] and [`When::RetryAfter`]: one more failure recorded
    /// with the rate limiter, then the delay `backoff` says; a pending key
    /// only gets `payload` (see [`add_rate_limited`](Self::add_rate_limited)).
    fn enqueue_backoff(&self, key: K, backoff: Backoff, priority: Priority, payload: T) {
        let now = self.now();
        let scheduled = self.with_core(|core| {
            if core.is_shut_down() || core.merge_pending(&key, payload) {
                return None;
            }
            let (delay, panicked) = match self.ask_limiter(|l| l.when(&key)) {
                Some(delay) => (delay, None),
                None => (LIMITER_PANIC_DELAY, Some(key.clone())),
            };
            let delay = match backoff {
                Backoff::Floor(floor) => delay.max(floor),
                Backoff::Instead(delay) => delay,
            };
            Some((
                core.add_after(key, now.after(delay), priority, payload, now),
                panicked,
            ))
        });
        if let Some((scheduled, panicked)) = scheduled {
            if let Some(key) = panicked {
                tracing::error!(queue = %self.shared.name, ?key, fallback = ?LIMITER_PANIC_DELAY, "the rate limiter panicked (a backoff waits the fallback delay, a retry-after its own)");
                self.report(|o| o.limiter_panicked());
            }
            self.report(|o| o.retried());
            self.after_schedule(scheduled);
        }
    }

    /// Forgets `key`'s failures: its next rate-limited add starts the backoff
    /// afresh. Call it when the key was processed successfully.
    pub fn forget(&self, key: &K) {
        self.limiter_logged("forget", key, |l| l.forget(key));
    }

    /// How many failures of `key` the rate limiter has on record (0 if the
    /// rate limiter panicked when asked).
    #[must_use]
    pub fn retries(&self, key: &K) -> u32 {
        self.limiter_logged("retries", key, |l| l.retries(key))
            .unwrap_or(0)
    }

    /// How many keys the rate limiter keeps failures for
    /// ([`RateLimiter::tracked`]; 0 if it panicked when asked): keys that
    /// failed and have not succeeded or been forgotten since.
    #[must_use]
    pub fn rate_limited(&self) -> usize {
        self.ask_limiter(|l| l.tracked()).unwrap_or(0)
    }

    /// Asks the rate limiter (user code) something; `None` if it panicked.
    fn ask_limiter<R>(&self, ask: impl FnOnce(&dyn RateLimiter<K>) -> R) -> Option<R> {
        std::panic::catch_unwind(AssertUnwindSafe(|| ask(&*self.shared.limiter))).ok()
    }

    /// [`ask_limiter`](Self::ask_limiter) about `key`, logging and counting
    /// a panic.
    fn limiter_logged<R>(
        &self,
        call: &str,
        key: &K,
        ask: impl FnOnce(&dyn RateLimiter<K>) -> R,
    ) -> Option<R> {
        let answer = self.ask_limiter(ask);
        if answer.is_none() {
            tracing::error!(queue = %self.shared.name, ?key, call, "the rate limiter panicked");
            self.report(|o| o.limiter_panicked());
        }
        answer
    }

    /// Waits for the next key and hands it to the caller, who must call
    /// [`done`](Self::done) when finished with it. Returns `None` once the
    /// queue is shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a key is taken from the queue only in the poll that
    /// returns it, so dropping the future loses no key.
    pub async fn get(&self) -> Option<K> {
        self.get_handed().await.map(|handed| handed.key)
    }

    /// [`get`](Self::get), with the payload merged from the key's adds since
    /// it was last handed out (see [`Payload`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`get`](Self::get).
    pub async fn get_with_payload(&self) -> Option<(K, T)> {
        self.get_handed()
            .await
            .map(|handed| (handed.key, handed.payload))
    }

    /// [`get_with_payload`](Self::get_with_payload), with the priority the
    /// key was queued at.
    pub(crate) async fn get_handed(&self) -> Option<Handed<K, T>> {
        // Fast path: a key is ready, no waiter registration needed.
        if let ControlFlow::Break(got) = self.take_next(Core::look) {
            return got;
        }
        loop {
            let notified = self.shared.signals.ready.notified();
            tokio::pin!(notified);
            // Registered before looking again, so an add between the look and
            // the wait still wakes us.
            notified.as_mut().enable();
            match self.take_next(Core::look_registered) {
                ControlFlow::Break(got) => return got,
                ControlFlow::Continue(None) => notified.await,
                ControlFlow::Continue(Some(deadline)) => {
                    // Counted as watching the timers by the look: uncounted
                    // however the wait ends (even if dropped).
                    let _watching = Watching::new(&self.shared.core);
                    let deadline = Instant::from_std(self.shared.epoch.instant(deadline));
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
            }
        }
    }

    /// Runs a look under the lock and does what it says: `Break` with what
    /// `get` returns, or `Continue` to sleep (until the deadline, if any).
    fn take_next(
        &self,
        look: impl FnOnce(&mut Core<K, T>, Stamp) -> Look<K, T>,
    ) -> ControlFlow<Option<Handed<K, T>>, Option<Stamp>> {
        let look = self.with_core(|core| look(core, self.now()));
        match look {
            Look::Took {
                handed,
                waited,
                fired,
                wake,
            } => {
                for _ in 0..fired {
                    self.report(|o| o.added());
                }
                self.shared.signals.wake(wake);
                self.report(|o| o.queued_for(waited));
                ControlFlow::Break(Some(handed))
            }
            Look::Closed => ControlFlow::Break(None),
            Look::Sleep { until, fired } => {
                // Timers that fired for keys in flight are adds too.
                for _ in 0..fired {
                    self.report(|o| o.added());
                }
                ControlFlow::Continue(until)
            }
        }
    }

    /// Ends the processing of `key`: if it was added meanwhile, it is queued
    /// again.
    ///
    /// # Errors
    ///
    /// [`DoneError`] if no worker holds `key` (never handed out, or `done`
    /// called twice); nothing changes.
    pub fn done(&self, key: &K) -> Result<(), DoneError> {
        let now = self.now();
        let ended = self.with_core(|core| core.end(key, now));
        let ended = ended.map_err(|_| DoneError {
            key: format!("{key:?}"),
        })?;
        self.shared.signals.wake(ended.wake);
        self.report(|o| o.worked_for(ended.worked));
        Ok(())
    }

    /// Shuts the queue down now: every waiting and future [`get`](Self::get)
    /// returns `None`, ready, scheduled and dirty keys are dropped (and
    /// counted in [`QueueStats::dropped`]), and later adds are ignored.
    /// Workers may still call [`done`](Self::done) for keys they hold.
    ///
    /// Called while a [`shutdown_with_drain`](Self::shutdown_with_drain) is
    /// waiting, it cuts that wait short.
    pub fn shutdown(&self) {
        let shut = self.with_core(Core::shut);
        self.shared.signals.wake(shut.wake);
        if shut.dropped > 0 {
            self.report(|o| o.dropped(shut.dropped));
        }
    }

    /// Shuts the queue down like [`shutdown`](Self::shutdown) (if it is not
    /// already), then waits until every in-flight key is [`done`](Self::done),
    /// or until a later `shutdown` cuts the wait short. Several drains may
    /// wait at once; none cuts another short.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown happens on the first poll; dropping the
    /// future only stops the waiting.
    pub async fn shutdown_with_drain(&self) {
        let (shut, epoch) = self.with_core(Core::shut_to_drain);
        self.shared.signals.wake(shut.wake);
        if shut.dropped > 0 {
            self.report(|o| o.dropped(shut.dropped));
        }
        loop {
            let notified = self.shared.signals.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&self.shared.core).is_drained(epoch) {
                return;
            }
            notified.await;
        }
    }

    /// [`is_shut_down`](Self::is_shut_down) without the lock (possibly a
    /// moment late: for workers deciding whether to start another key).
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.signals.is_closed()
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    #[must_use]
    pub fn is_shut_down(&self) -> bool {
        lock(&self.shared.core).is_shut_down()
    }

    /// The number of ready keys (not counting scheduled or in-flight ones).
    #[must_use]
    pub fn len(&self) -> usize {
        lock(&self.shared.core).ready_len()
    }

    /// Keys the queue holds a slot for: ready, scheduled or in flight.
    pub(crate) fn keys_len(&self) -> usize {
        lock(&self.shared.core).keys_len()
    }

    /// Whether no key is ready.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls the observer. A panicking observer is logged and otherwise
    /// ignored: the queue's state never depends on it (it runs between taking
    /// a key and handing it out, where a panic would strand the key).
    fn report(&self, call: impl FnOnce(&dyn QueueObserver)) {
        let observer = &*self.shared.observer;
        if std::panic::catch_unwind(AssertUnwindSafe(|| call(observer))).is_err() {
            tracing::error!(queue = %self.shared.name, "the queue observer panicked");
        }
    }

    /// Tokio's clock (so paused-time tests drive the queue) as a core stamp.
    fn now(&self) -> Stamp {
        self.stamp(Instant::now())
    }

    fn stamp(&self, at: Instant) -> Stamp {
        self.shared.epoch.stamp(at.into_std())
    }

    /// Runs `f` on the locked core.
    ///
    /// A change of the ready count is reported to the observer before the
    /// lock is released, so depth reports arrive in the order of the changes.
    fn with_core<R>(&self, f: impl FnOnce(&mut Core<K, T>) -> R) -> R {
        let mut core = lock(&self.shared.core);
        let before = core.ready_len();
        let out = f(&mut core);
        let ready = core.ready_len();
        if ready != before {
            self.report(|o| o.depth(ready));
        }
        out
    }

    fn after_add(&self, added: Added) {
        self.shared.signals.wake(added.wake());
        if matches!(added, Added::Queued | Added::Dirty) {
            self.report(|o| o.added());
        }
    }

    fn after_schedule(&self, scheduled: Scheduled) {
        if let Scheduled::Now(added) = scheduled {
            self.after_add(added);
        } else {
            self.shared.signals.wake(scheduled.wake());
        }
    }
}

impl Ring for Notify {
    fn notify_one(&self) {
        Notify::notify_one(self);
    }

    fn notify_waiters(&self) {
        Notify::notify_waiters(self);
    }
}

impl<K: QueueKey, T: Payload> Default for WorkQueue<K, T> {
    fn default() -> Self {
        WorkQueue::builder().payload().build()
    }
}

impl<K, T> Clone for WorkQueue<K, T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, T> fmt::Debug for WorkQueue<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}
