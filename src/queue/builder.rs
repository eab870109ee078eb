//! Configuration of a [`WorkQueue`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::core::{Core, Debounce};
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

    /// Debounces the change events a controller adds (`Add::debounced`).
    pub(crate) fn debounce(mut self, debounce: Debounce) -> Self {
        self.debounce = Some(debounce);
        self
    }

    /// Builds the queue.
    #[must_use]
    pub fn build(self) -> WorkQueue<K, T> {
        let limiter = self
            .limiter
            .unwrap_or_else(|| Box::new(default_rate_limiter()));
        WorkQueue {
            shared: Arc::new(Shared {
                name: self.name,
                core: Mutex::new(match self.debounce {
                    Some(debounce) => Core::new(self.max_wait).with_debounce(debounce),
                    None => Core::new(self.max_wait),
                }),
                signals: super::wake::Signals::new(
                    tokio::sync::Notify::new(),
                    tokio::sync::Notify::new(),
                ),
                limiter,
                observer: self.observer,
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
            .finish_non_exhaustive()
    }
}
