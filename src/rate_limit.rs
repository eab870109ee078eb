//! Rate limiters: how long a key waits before its next attempt.
//!
//! A [`RateLimiter`] answers one question, [`when`](RateLimiter::when): "this
//! key is being retried; how long should it wait?". The
//! [`WorkQueue`](crate::WorkQueue) asks it on every
//! [`add_rate_limited`](crate::WorkQueue::add_rate_limited) whose key is not
//! already pending, so a deduplicated add never spends a token or counts as a
//! failure (Go's workqueue spends one: controller-runtime issue #1594).
//!
//! | limiter | per key | what it does |
//! |---|---|---|
//! | [`ExponentialBackoff`] | yes | `base × 2^failures`, capped, optional jitter |
//! | [`TokenBucket`] | no | an overall rate with a burst, shared by all keys |
//! | [`FastSlow`] | yes | a short delay for the first attempts, a long one after |
//! | [`MaxOf`] | — | the longest delay of several limiters |
//!
//! [`default_rate_limiter`] is the usual choice for a controller: the maximum
//! of a 5 ms → 1000 s exponential backoff and a 10/s token bucket with a burst
//! of 100, as in client-go.
//!
//! Time comes from tokio, so `#[tokio::test(start_paused = true)]` controls
//! every limiter.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use dashmap::DashMap;
use foldhash::fast::RandomState;
use tokio::time::Instant;

use crate::QueueKey;

/// Decides how long a retried key waits before its next attempt.
///
/// Implementations keep their own synchronisation (`&self` methods): the
/// queue calls them from many tasks at once, while holding its own lock, so
/// they must be quick and must not call back into the queue.
pub trait RateLimiter<K>: Send + Sync {
    /// Records one more failure of `key` and returns how long it should wait
    /// before its next attempt.
    fn when(&self, key: &K) -> Duration;

    /// Drops every piece of state kept for `key` (its failure count); call it
    /// when the key succeeded or no longer exists.
    fn forget(&self, key: &K);

    /// How many failures of `key` are on record since the last
    /// [`forget`](RateLimiter::forget).
    ///
    /// Controllers skip `forget` for keys with no retries on record, so a
    /// limiter that keeps per-key state must count that key here.
    fn retries(&self, key: &K) -> u32;
}

/// A rate limiter's configuration was invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitError {
    /// The base delay of an exponential backoff was zero, so it would never grow.
    #[error("backoff base delay must be greater than zero")]
    ZeroBase,
    /// The base delay was longer than the cap.
    #[error("backoff base delay {base:?} exceeds its cap {cap:?}")]
    BaseAboveCap {
        /// The base delay given.
        base: Duration,
        /// The cap given.
        cap: Duration,
    },
    /// The jitter fraction was not a number in `0.0..=1.0`.
    #[error("jitter must be a fraction between 0 and 1, got {0}")]
    InvalidJitter(f64),
}

/// Per-key exponential backoff: `base × 2^failures`, never above `cap`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::rate_limit::{ExponentialBackoff, RateLimiter};
///
/// let backoff = ExponentialBackoff::new(Duration::from_millis(5), Duration::from_secs(1000))?;
/// assert_eq!(backoff.when(&"a"), Duration::from_millis(5));
/// assert_eq!(backoff.when(&"a"), Duration::from_millis(10));
/// assert_eq!(backoff.when(&"b"), Duration::from_millis(5));
/// backoff.forget(&"a");
/// assert_eq!(backoff.when(&"a"), Duration::from_millis(5));
/// # Ok::<(), tend::rate_limit::RateLimitError>(())
/// ```
pub struct ExponentialBackoff<K> {
    base: Duration,
    cap: Duration,
    jitter: f64,
    failures: DashMap<K, u32, RandomState>,
}

impl<K: QueueKey> ExponentialBackoff<K> {
    /// A backoff starting at `base` and doubling up to `cap`.
    ///
    /// # Errors
    ///
    /// [`RateLimitError::ZeroBase`] when `base` is zero,
    /// [`RateLimitError::BaseAboveCap`] when `base > cap`.
    pub fn new(base: Duration, cap: Duration) -> Result<Self, RateLimitError> {
        if base.is_zero() {
            return Err(RateLimitError::ZeroBase);
        }
        if base > cap {
            return Err(RateLimitError::BaseAboveCap { base, cap });
        }
        Ok(Self {
            base,
            cap,
            jitter: 0.0,
            failures: DashMap::default(),
        })
    }

    /// Adds up to `fraction × delay` of random extra delay (still capped), so
    /// that keys failing together do not retry in lock step.
    ///
    /// # Errors
    ///
    /// [`RateLimitError::InvalidJitter`] unless `fraction` is in `0.0..=1.0`.
    pub fn jitter(mut self, fraction: f64) -> Result<Self, RateLimitError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(RateLimitError::InvalidJitter(fraction));
        }
        self.jitter = fraction;
        Ok(self)
    }

    fn delay_for(&self, failures: u32) -> Duration {
        // 2^failures overflows quickly: compute in u128 nanoseconds and clamp
        // the shift, then cap.
        let nanos = self.base.as_nanos() << failures.min(64);
        let capped = nanos.min(self.cap.as_nanos());
        let secs = u64::try_from(capped / 1_000_000_000).unwrap_or(u64::MAX);
        let delay = Duration::new(secs, (capped % 1_000_000_000) as u32).min(self.cap);
        if self.jitter == 0.0 {
            return delay;
        }
        delay
            .mul_f64(1.0 + self.jitter * fastrand::f64())
            .min(self.cap)
    }
}

impl<K: QueueKey> RateLimiter<K> for ExponentialBackoff<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = self.failures.entry(key.clone()).or_insert(0);
        let delay = self.delay_for(*failures);
        *failures = failures.saturating_add(1);
        delay
    }

    fn forget(&self, key: &K) {
        self.failures.remove(key);
    }

    fn retries(&self, key: &K) -> u32 {
        self.failures.get(key).map_or(0, |n| *n)
    }
}

impl<K: QueueKey> fmt::Debug for ExponentialBackoff<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialBackoff")
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("jitter", &self.jitter)
            .field("tracked_keys", &self.failures.len())
            .finish()
    }
}

/// An overall rate limit shared by all keys: `per_second` attempts per
/// second on average, with bursts of up to `burst`.
///
/// It keeps no per-key state: [`forget`](RateLimiter::forget) does nothing and
/// [`retries`](RateLimiter::retries) is always 0. Delays are exact (integer
/// nanoseconds, the GCRA form of a token bucket), so the n-th attempt beyond
/// the burst waits exactly `n / per_second`.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use tend::rate_limit::{RateLimiter, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let bucket = TokenBucket::new(NonZeroU32::new(10).unwrap(), NonZeroU32::new(2).unwrap());
/// assert_eq!(bucket.when(&"a"), Duration::ZERO);
/// assert_eq!(bucket.when(&"b"), Duration::ZERO);
/// assert_eq!(bucket.when(&"c"), Duration::from_millis(100));
/// # }
/// ```
#[derive(Debug)]
pub struct TokenBucket {
    interval: Duration,
    tolerance: Duration,
    // The theoretical arrival time of the next attempt; `None` until first use.
    next: parking_lot::Mutex<Option<Instant>>,
}

impl TokenBucket {
    /// A bucket refilling `per_second` tokens per second, holding at most `burst`.
    #[must_use]
    pub fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        let interval = Duration::from_secs(1) / per_second.get();
        Self {
            interval,
            tolerance: interval * (burst.get() - 1),
            next: parking_lot::Mutex::new(None),
        }
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&self, _key: &K) -> Duration {
        let now = Instant::now();
        let mut next = self.next.lock();
        let arrival = next.map_or(now, |t| t.max(now));
        *next = Some(arrival + self.interval);
        (arrival - now).saturating_sub(self.tolerance)
    }

    fn forget(&self, _key: &K) {}

    fn retries(&self, _key: &K) -> u32 {
        0
    }
}

/// Per-key two-speed limiter: `fast` for the first `fast_attempts` failures,
/// `slow` after that.
#[derive(Debug)]
pub struct FastSlow<K: QueueKey> {
    fast: Duration,
    slow: Duration,
    fast_attempts: u32,
    failures: DashMap<K, u32, RandomState>,
}

impl<K: QueueKey> FastSlow<K> {
    /// A limiter waiting `fast` for the first `fast_attempts` failures of a
    /// key, then `slow`.
    #[must_use]
    pub fn new(fast: Duration, slow: Duration, fast_attempts: NonZeroU32) -> Self {
        Self {
            fast,
            slow,
            fast_attempts: fast_attempts.get(),
            failures: DashMap::default(),
        }
    }
}

impl<K: QueueKey> RateLimiter<K> for FastSlow<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = self.failures.entry(key.clone()).or_insert(0);
        *failures = failures.saturating_add(1);
        if *failures <= self.fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, key: &K) {
        self.failures.remove(key);
    }

    fn retries(&self, key: &K) -> u32 {
        self.failures.get(key).map_or(0, |n| *n)
    }
}

/// The longest delay of several limiters; every limiter records each failure.
pub struct MaxOf<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOf<K> {
    /// Combines `limiters`; with none, every delay is zero.
    #[must_use]
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(key))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn retries(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.retries(key))
            .max()
            .unwrap_or(0)
    }
}

impl<K> fmt::Debug for MaxOf<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

/// client-go's default controller rate limiter: the maximum of a per-key
/// exponential backoff (5 ms doubling to 1000 s) and an overall token bucket
/// (10 per second, burst 100).
#[must_use]
pub fn default_rate_limiter<K: QueueKey>() -> MaxOf<K> {
    const BASE: Duration = Duration::from_millis(5);
    const CAP: Duration = Duration::from_secs(1000);
    const PER_SECOND: NonZeroU32 = NonZeroU32::new(10).unwrap();
    const BURST: NonZeroU32 = NonZeroU32::new(100).unwrap();
    let backoff = ExponentialBackoff {
        base: BASE,
        cap: CAP,
        jitter: 0.0,
        failures: DashMap::default(),
    };
    MaxOf::new(vec![
        Box::new(backoff),
        Box::new(TokenBucket::new(PER_SECOND, BURST)),
    ])
}
