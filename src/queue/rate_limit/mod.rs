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
//! Every duration up to `Duration::MAX` and every failure count up to
//! `u32::MAX` is handled with saturating arithmetic: no limiter panics or
//! wraps, and a per-key limiter's delay never shrinks as failures grow (with
//! jitter: never below the un-jittered delay) and is never zero.
//!
//! Time comes from tokio, so `#[tokio::test(start_paused = true)]` controls
//! every limiter.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use foldhash::fast::RandomState;
use tokio::time::Instant;

use super::QueueKey;

mod max_of;

pub use self::max_of::{MaxOf, default_rate_limiter};

/// Decides how long a retried key waits before its next attempt.
///
/// Implementations keep their own synchronisation (`&self` methods): the
/// queue calls them from many tasks at once, while holding its own lock, so
/// they must be quick and must not call back into the queue.
///
/// # Examples
///
/// A limiter of your own, given to a queue (or to a controller, with
/// [`ControllerBuilder::rate_limiter`](crate::controller::ControllerBuilder::rate_limiter)):
///
/// ```
/// use std::time::Duration;
/// use tend::WorkQueue;
/// use tend::rate_limit::RateLimiter;
///
/// /// Every retry waits the same: no per-key state to keep.
/// struct Fixed(Duration);
///
/// impl<K> RateLimiter<K> for Fixed {
///     fn when(&self, _key: &K) -> Duration { self.0 }
///     fn forget(&self, _key: &K) {}
///     fn retries(&self, _key: &K) -> u32 { 0 }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = WorkQueue::builder().rate_limiter(Fixed(Duration::from_secs(1))).build();
/// queue.add_rate_limited("web"); // failed: again in a second
/// assert_eq!((queue.len(), queue.stats().scheduled), (0, 1));
/// tokio::time::advance(Duration::from_secs(1)).await;
/// assert_eq!(queue.get().await, Some("web"));
/// # }
/// ```
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

    /// How many keys it keeps state for: what a leak check watches
    /// ([`WorkQueue::rate_limited`](crate::WorkQueue::rate_limited)). The
    /// default says 0, for a limiter that keeps none.
    fn tracked(&self) -> usize {
        0
    }
}

/// A rate limiter's configuration was invalid.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::rate_limit::{ExponentialBackoff, RateLimitError};
///
/// let built = ExponentialBackoff::<String>::new(Duration::ZERO, Duration::from_secs(60));
/// assert!(matches!(built, Err(RateLimitError::ZeroBase))); // retries would spin
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitError {
    /// The base delay of a per-key limiter (an [`ExponentialBackoff`]'s
    /// `base`, a [`FastSlow`]'s `fast`) was zero: failed keys would retry in
    /// a hot loop.
    #[error("backoff base delay must be greater than zero")]
    ZeroBase,
    /// The base delay was longer than the cap (for a [`FastSlow`]: `fast`
    /// longer than `slow`), so delays would shrink as failures grow.
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
    /// [`MaxOf::new`] was given no limiter: every retry would be immediate.
    #[error("a maximum of rate limiters needs at least one limiter")]
    NoLimiters,
}

/// The failures of each key with some on record. A count of tracked keys
/// lets `get` skip hashing while no key has failed, which is the common
/// case: every reconcile asks for its key's failures.
struct Failures<K> {
    map: DashMap<K, u32, RandomState>,
    tracked: AtomicUsize,
}

impl<K> Default for Failures<K>
where
    K: QueueKey,
{
    fn default() -> Self {
        Self {
            map: DashMap::default(),
            tracked: AtomicUsize::new(0),
        }
    }
}

impl<K: QueueKey> Failures<K> {
    /// Counts one more failure of `key`; returns the count before it.
    fn bump(&self, key: &K) -> u32 {
        let mut entry = self.map.entry(key.clone()).or_insert_with(|| {
            self.tracked.fetch_add(1, Ordering::Relaxed);
            0
        });
        let before = *entry;
        *entry = before.saturating_add(1);
        before
    }

    fn forget(&self, key: &K) {
        if self.tracked.load(Ordering::Relaxed) != 0 && self.map.remove(key).is_some() {
            self.tracked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn get(&self, key: &K) -> u32 {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.map.get(key).map_or(0, |n| *n)
    }

    fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// Sets `key`'s failures (tests start a key deep in its backoff).
    #[cfg(test)]
    fn set(&self, key: K, failures: u32) {
        if self.map.insert(key, failures).is_none() {
            self.tracked.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<K> fmt::Debug for Failures<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failures")
            .field("tracked", &self.tracked.load(Ordering::Relaxed))
            .finish()
    }
}

/// Per-key exponential backoff: `base × 2^failures`, never above `cap`.
///
/// The arithmetic saturates: every failure count up to `u32::MAX` and every
/// duration up to `Duration::MAX` gives a delay between `base` and `cap`
/// that never shrinks as failures grow, so `Duration::MAX` as the cap means
/// "no cap" (delays keep doubling until they no longer fit).
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
    failures: Failures<K>,
}

impl<K: QueueKey> ExponentialBackoff<K> {
    /// A backoff starting at `base` and doubling up to `cap`
    /// (`Duration::MAX`: no cap).
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
            failures: Failures::default(),
        })
    }

    /// Adds up to `fraction × delay` of random extra delay (still capped), so
    /// that keys failing together do not retry in lock step. A jittered
    /// delay is never below the un-jittered one.
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

    /// The delay after `failures` earlier failures, `unit` (in `0.0..1.0`)
    /// choosing the jitter.
    fn delay_for(&self, failures: u32, unit: f64) -> Duration {
        let delay = crate::time::doubled(self.base, failures, self.cap);
        if self.jitter == 0.0 {
            return delay;
        }
        crate::time::scaled(delay, 1.0 + self.jitter * unit).min(self.cap)
    }
}

impl<K: QueueKey> RateLimiter<K> for ExponentialBackoff<K> {
    fn when(&self, key: &K) -> Duration {
        let before = self.failures.bump(key);
        self.delay_for(before, fastrand::f64())
    }

    fn forget(&self, key: &K) {
        self.failures.forget(key);
    }

    fn retries(&self, key: &K) -> u32 {
        self.failures.get(key)
    }

    fn tracked(&self) -> usize {
        self.failures.tracked()
    }
}

impl<K: QueueKey> fmt::Debug for ExponentialBackoff<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialBackoff")
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("jitter", &self.jitter)
            .field("tracked_keys", &self.failures.tracked())
            .finish()
    }
}

/// An overall rate limit shared by all keys: `per_second` attempts per
/// second on average, with bursts of up to `burst`.
///
/// It keeps no per-key state: [`forget`](RateLimiter::forget) does nothing and
/// [`retries`](RateLimiter::retries) is always 0. Every rate up to
/// `u32::MAX` per second is kept exactly (the GCRA form of a token bucket,
/// in integer ticks of `1 / per_second` ns): the n-th attempt beyond the
/// burst waits `n / per_second`, rounded up to a whole nanosecond.
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
    per_second: NonZeroU32,
    burst: NonZeroU32,
    // From the first attempt on: its instant, and the theoretical arrival
    // time of the next attempt in ticks since then.
    state: parking_lot::Mutex<Option<(Instant, u128)>>,
}

/// One token's interval, in ticks of `1 / per_second` ns: a second is
/// `10^9 × per_second` ticks, whatever the rate.
const TICKS_PER_TOKEN: u128 = 1_000_000_000;

impl TokenBucket {
    /// A bucket refilling `per_second` tokens per second, holding at most `burst`.
    #[must_use]
    pub fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        Self {
            per_second,
            burst,
            state: parking_lot::Mutex::new(None),
        }
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&self, _key: &K) -> Duration {
        let instant = Instant::now();
        let per_second = u128::from(self.per_second.get());
        let mut state = self.state.lock();
        let (epoch, next) = state.get_or_insert((instant, 0));
        // Below 2^94 ns times 2^32 ticks per ns: no overflow.
        let now = instant.saturating_duration_since(*epoch).as_nanos() * per_second;
        let arrival = (*next).max(now);
        *next = arrival.saturating_add(TICKS_PER_TOKEN);
        let tolerance = u128::from(self.burst.get() - 1) * TICKS_PER_TOKEN;
        let wait = (arrival - now).saturating_sub(tolerance);
        crate::time::from_nanos_saturating(wait.div_ceil(per_second))
    }

    fn forget(&self, _key: &K) {}

    fn retries(&self, _key: &K) -> u32 {
        0
    }
}

/// Per-key two-speed limiter: `fast` for the first `fast_attempts` failures,
/// `slow` after that.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use tend::rate_limit::{FastSlow, RateLimiter};
///
/// let two = NonZeroU32::new(2).unwrap();
/// let limiter = FastSlow::new(Duration::from_millis(5), Duration::from_secs(10), two)?;
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// assert_eq!(limiter.when(&"a"), Duration::from_secs(10));
/// # Ok::<(), tend::rate_limit::RateLimitError>(())
/// ```
#[derive(Debug)]
pub struct FastSlow<K: QueueKey> {
    fast: Duration,
    slow: Duration,
    fast_attempts: u32,
    failures: Failures<K>,
}

impl<K: QueueKey> FastSlow<K> {
    /// A limiter waiting `fast` for the first `fast_attempts` failures of a
    /// key, then `slow`.
    ///
    /// # Errors
    ///
    /// [`RateLimitError::ZeroBase`] when `fast` is zero,
    /// [`RateLimitError::BaseAboveCap`] (base `fast`, cap `slow`) when
    /// `fast > slow`.
    pub fn new(
        fast: Duration,
        slow: Duration,
        fast_attempts: NonZeroU32,
    ) -> Result<Self, RateLimitError> {
        if fast.is_zero() {
            return Err(RateLimitError::ZeroBase);
        }
        if fast > slow {
            return Err(RateLimitError::BaseAboveCap {
                base: fast,
                cap: slow,
            });
        }
        Ok(Self {
            fast,
            slow,
            fast_attempts: fast_attempts.get(),
            failures: Failures::default(),
        })
    }
}

impl<K: QueueKey> RateLimiter<K> for FastSlow<K> {
    fn when(&self, key: &K) -> Duration {
        let failures = self.failures.bump(key).saturating_add(1);
        if failures <= self.fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, key: &K) {
        self.failures.forget(key);
    }

    fn retries(&self, key: &K) -> u32 {
        self.failures.get(key)
    }

    fn tracked(&self) -> usize {
        self.failures.tracked()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::time::from_nanos_saturating;
    use crate::time::strategies::{any_count, any_positive_duration};

    /// A positive base and a cap not below it, over the whole range.
    fn base_and_cap() -> impl Strategy<Value = (Duration, Duration)> {
        (any_positive_duration(), any_positive_duration()).prop_map(|(a, b)| (a.min(b), a.max(b)))
    }

    /// `min(cap, base × 2^failures)` by checked multiplication.
    fn expected(base: Duration, failures: u32, cap: Duration) -> Duration {
        1u128
            .checked_shl(failures)
            .and_then(|power| base.as_nanos().checked_mul(power))
            .map_or(cap, |nanos| from_nanos_saturating(nanos).min(cap))
    }

    /// An exponential backoff whose key 0 has failed `failures` times.
    fn backoff_at(
        base: Duration,
        cap: Duration,
        jitter: f64,
        failures: u32,
    ) -> ExponentialBackoff<u8> {
        let backoff = ExponentialBackoff::new(base, cap)
            .and_then(|b| b.jitter(jitter))
            .expect("valid");
        backoff.failures.set(0, failures);
        backoff
    }

    /// A fast-slow limiter whose key 0 has failed `failures` times.
    fn fast_slow_at(fast: Duration, slow: Duration, attempts: u32, failures: u32) -> FastSlow<u8> {
        let attempts = NonZeroU32::new(attempts).unwrap_or(NonZeroU32::MIN);
        let limiter = FastSlow::new(fast, slow, attempts).expect("valid");
        limiter.failures.set(0, failures);
        limiter
    }

    #[test]
    fn the_tracked_count_follows_the_keys_with_failures() {
        let failures = Failures::<u8>::default();
        assert_eq!(failures.get(&1), 0, "nothing tracked: no lookup");
        assert_eq!(failures.bump(&1), 0);
        assert_eq!(failures.bump(&1), 1);
        assert_eq!(failures.bump(&2), 0);
        assert_eq!((failures.get(&1), failures.get(&2)), (2, 1));
        assert_eq!(failures.tracked.load(Ordering::Relaxed), 2);
        failures.forget(&1);
        failures.forget(&1);
        failures.forget(&3);
        assert_eq!(
            failures.tracked.load(Ordering::Relaxed),
            1,
            "each key counted once"
        );
        assert_eq!((failures.get(&1), failures.get(&2)), (0, 1));
        failures.forget(&2);
        assert_eq!(failures.tracked.load(Ordering::Relaxed), 0);
        assert_eq!(failures.bump(&2), 0, "forgotten: the backoff starts afresh");
    }

    proptest! {
        #[test]
        fn without_jitter_the_backoff_is_exact_capped_and_never_shrinks(
            (base, cap) in base_and_cap(),
            failures in any_count(),
        ) {
            let backoff = backoff_at(base, cap, 0.0, failures);
            let first = backoff.when(&0);
            prop_assert_eq!(first, expected(base, failures, cap));
            prop_assert!(first >= base && first <= cap);
            prop_assert!(backoff.when(&0) >= first);
            prop_assert_eq!(backoff.retries(&0), failures.saturating_add(2));
        }

        #[test]
        fn jitter_keeps_the_backoff_between_its_delay_and_the_fraction_above(
            (base, cap) in base_and_cap(),
            failures in any_count(),
            jitter in 0.0f64..=1.0,
            unit in 0.0f64..1.0,
        ) {
            let backoff = backoff_at(base, cap, jitter, failures);
            let plain = expected(base, failures, cap);
            for delay in [backoff.delay_for(failures, unit), backoff.when(&0)] {
                prop_assert!(delay >= plain && delay <= cap, "{delay:?} vs {plain:?}");
                let most = plain.as_nanos() as f64 * (1.0 + jitter);
                prop_assert!(delay.as_nanos() as f64 <= most * (1.0 + 1e-12) + 1.0, "{delay:?}");
            }
        }

        #[test]
        fn fast_slow_is_fast_for_its_attempts_then_slow_and_never_shrinks(
            (fast, slow) in base_and_cap(),
            attempts in any_count(),
            failures in any_count(),
        ) {
            let limiter = fast_slow_at(fast, slow, attempts, failures);
            let attempts = attempts.max(1);
            let want = if failures.saturating_add(1) <= attempts { fast } else { slow };
            let first = limiter.when(&0);
            prop_assert_eq!(first, want);
            prop_assert!(!first.is_zero());
            prop_assert!(limiter.when(&0) >= first);
            prop_assert_eq!(limiter.retries(&0), failures.saturating_add(2));
        }

        #[test]
        fn max_of_is_the_longest_delay_and_never_shrinks(
            (base, cap) in base_and_cap(),
            (fast, slow) in base_and_cap(),
            failures in any_count(),
        ) {
            let limiter = MaxOf::new(vec![
                Box::new(backoff_at(base, cap, 0.0, failures)),
                Box::new(fast_slow_at(fast, slow, 3, failures)),
            ])
            .expect("two limiters");
            let fast_or_slow = if failures < 3 { fast } else { slow };
            let first = limiter.when(&0);
            prop_assert_eq!(first, expected(base, failures, cap).max(fast_or_slow));
            prop_assert!(!first.is_zero());
            prop_assert!(limiter.when(&0) >= first);
        }
    }
}
