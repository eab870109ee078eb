//! Configuration of a [`WorkQueue`].

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::core::{Core, Debounce};
use super::groups::group_fn;
use super::levels::GroupFn;
use super::observer::NoopObserver;
use super::rate_limit::{RateLimiter, default_rate_limiter};
use super::{Payload, QueueKey, QueueObserver, Shared, WorkQueue};
use crate::sync::Mutex;

/// Configures a [`WorkQueue`]; start from [`WorkQueue::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::WorkQueue;
/// use tend::rate_limit::ExponentialBackoff;
///
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .name("replicasets")
///     .rate_limiter(ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(60))?)
///     .max_wait(Duration::from_secs(5))
///     .build();
/// assert_eq!(queue.name(), "replicasets");
/// # Ok::<(), tend::rate_limit::RateLimitError>(())
/// ```
#[must_use]
pub struct WorkQueueBuilder<K, T = ()> {
    name: String,
    limiter: Option<Box<dyn RateLimiter<K>>>,
    observer: Arc<dyn QueueObserver>,
    max_wait: Duration,
    debounce: Option<Debounce>,
    group: Option<GroupFn<K>>,
    metered: Vec<(String, u64)>,
    payload: PhantomData<fn() -> T>,
}

/// Ten seconds: long enough that a resync storm does not slow fresh
/// changes, short enough that no key waits unnoticed.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

impl<K: QueueKey> WorkQueueBuilder<K> {
    pub(super) fn new() -> Self {
        Self {
            name: String::from("workqueue"),
            limiter: None,
            observer: Arc::new(NoopObserver),
            max_wait: DEFAULT_MAX_WAIT,
            debounce: None,
            group: None,
            metered: Vec::new(),
            payload: PhantomData,
        }
    }
}

impl<K: QueueKey, T: Payload> WorkQueueBuilder<K, T> {
    /// Makes the queue carry a [`Payload`] `U` with each key (default
    /// `()`, none), for [`WorkQueue::enqueue`] and
    /// [`WorkQueue::get_with_payload`].
    pub fn payload<U: Payload>(self) -> WorkQueueBuilder<K, U> {
        WorkQueueBuilder {
            name: self.name,
            limiter: self.limiter,
            observer: self.observer,
            max_wait: self.max_wait,
            debounce: self.debounce,
            group: self.group,
            metered: self.metered,
            payload: PhantomData,
        }
    }

    /// The name used in logs and metric labels (default `"workqueue"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The limiter behind [`WorkQueue::add_rate_limited`] (default
    /// [`default_rate_limiter`]).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// [`rate_limiter`](Self::rate_limiter) for an already boxed limiter.
    pub(crate) fn boxed_rate_limiter(mut self, limiter: Box<dyn RateLimiter<K>>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Receives the queue's measurements (default: none).
    pub fn observer(mut self, observer: Arc<dyn QueueObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// How long a lower-priority key may wait before it is served ahead of
    /// higher priorities (default 10 s). Once a key is overdue it is served on
    /// every other `get` until no key is overdue, so low priorities never
    /// starve yet never take more than half the throughput from fresh work.
    /// Zero makes every lower-priority key overdue at once: levels then
    /// alternate, one key each. `Duration::MAX` turns aging off (strict
    /// priorities: a steady stream of higher-priority keys starves the
    /// rest).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Serves keys fairly across the groups `group` puts them in (a key's
    /// tenant, namespace, customer): within each priority level the groups
    /// with ready keys take turns, one key a turn, each group's keys in
    /// order. A group with 100,000 ready keys then takes one hand-out in G
    /// (G the groups with ready keys at that level), not all of them, and a
    /// key that becomes ready in a group with none at its level is handed
    /// out within G of its level's hand-outs, G counted as it becomes
    /// ready; with `i` keys ahead in its group, within `(i + 1) × G`, G the
    /// most groups ready there meanwhile. A key handed back unstarted goes
    /// first again, with a turn for its group: one hand-out more for the
    /// keys of other groups waiting at its level, one key ahead more for
    /// those of its own.
    ///
    /// Priorities combine as without groups: a higher level goes first, and
    /// [`max_wait`](Self::max_wait) ages a lower level by the key it would
    /// serve next. Deduplication, per-key exclusivity and the payloads are
    /// unchanged. The function runs under the queue's lock on every key made
    /// ready: keep it cheap (a field, a prefix), and never call the queue
    /// from it (the lock is not reentrant). It should give a key the same
    /// group each time; one that answers differently later (a tenant table
    /// reloaded) loses nothing: a queued key stays in the group it was
    /// queued under until it is handed out or moves. Groups are known by a
    /// 64-bit hash of the value; two that collide share their turns. A key
    /// for which it panics is served in the group of `()`. Without it (the
    /// default) a level is one FIFO and nothing costs more.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use tend::WorkQueue;
    ///
    /// // Keys are "tenant/name": the noisy tenant's backlog does not starve "b".
    /// let queue: WorkQueue<String> = WorkQueue::builder()
    ///     .group_by(|key: &String| key.split('/').next().unwrap_or("").to_owned())
    ///     .build();
    /// for i in 0..1000 {
    ///     queue.add(format!("a/{i}"));
    /// }
    /// queue.add("b/web".to_owned());
    /// assert_eq!(queue.get().await.as_deref(), Some("a/0"));
    /// assert_eq!(queue.get().await.as_deref(), Some("b/web")); // not 1000th
    /// assert_eq!(queue.ready_in_group("a"), 999);
    /// # }
    /// ```
    pub fn group_by<G: Hash>(mut self, group: impl Fn(&K) -> G + Send + Sync + 'static) -> Self {
        self.group = Some(group_fn(group));
        self
    }

    /// [`group_by`](Self::group_by) for a function already made.
    pub(crate) fn grouped(mut self, group: GroupFn<K>) -> Self {
        self.group = Some(group);
        self
    }

    /// The groups whose ready keys `WorkQueue::metered_groups` reports, by
    /// label and hash.
    pub(crate) fn metered_groups(mut self, groups: Vec<(String, u64)>) -> Self {
        self.metered = groups;
        self
    }

    /// Debounces the change events a controller adds (`Add::debounced`).
    pub(crate) fn debounce(mut self, debounce: Debounce) -> Self {
        self.debounce = Some(debounce);
        self
    }

    fn core(&mut self) -> Core<K, T> {
        let mut core = Core::new(self.max_wait);
        if let Some(debounce) = self.debounce {
            core = core.with_debounce(debounce);
        }
        match self.group.take() {
            Some(group) => core.with_groups(group),
            None => core,
        }
    }

    /// Builds the queue.
    #[must_use]
    pub fn build(mut self) -> WorkQueue<K, T> {
        let core = self.core();
        let limiter = self
            .limiter
            .unwrap_or_else(|| Box::new(default_rate_limiter()));
        WorkQueue {
            shared: Arc::new(Shared {
                name: self.name,
                core: Mutex::new(core),
                signals: super::wake::Signals::new(
                    tokio::sync::Notify::new(),
                    tokio::sync::Notify::new(),
                ),
                limiter,
                observer: self.observer,
                metered: self.metered,
                epoch: super::stamp::Epoch::new(tokio::time::Instant::now().into_std()),
            }),
        }
    }
}

impl<K, T> fmt::Debug for WorkQueueBuilder<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("max_wait", &self.max_wait)
            .field("grouped", &self.group.is_some())
            .finish_non_exhaustive()
    }
}
