//! Several limiters as one, and client-go's default controller limiter.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use super::{ExponentialBackoff, Failures, RateLimitError, RateLimiter, TokenBucket};
use crate::key::QueueKey;

/// The longest delay of several limiters; every limiter records each failure.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use tend::rate_limit::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tend::rate_limit::RateLimitError> {
/// let one = NonZeroU32::new(1).unwrap();
/// let limiter = MaxOf::new(vec![
///     Box::new(ExponentialBackoff::new(Duration::from_millis(5), Duration::from_secs(60))?),
///     Box::new(TokenBucket::new(one, one)), // one retry per second, overall
/// ])?;
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5)); // the bucket had a token
/// assert_eq!(limiter.when(&"b"), Duration::from_secs(1)); // the bucket is empty
/// assert_eq!(limiter.retries(&"a"), 1);
/// # Ok(()) }
/// ```
pub struct MaxOf<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOf<K> {
    /// Combines `limiters`.
    ///
    /// # Errors
    ///
    /// [`RateLimitError::NoLimiters`] when `limiters` is empty.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Result<Self, RateLimitError> {
        if limiters.is_empty() {
            return Err(RateLimitError::NoLimiters);
        }
        Ok(Self { limiters })
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(key))
            .max()
            .unwrap_or_default()
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

    /// The most any of its limiters keeps (each keeps the same keys).
    fn tracked(&self) -> usize {
        self.limiters.iter().map(|l| l.tracked()).max().unwrap_or(0)
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
///
/// The bucket is shared by every key of the controller: while failures
/// come faster than 10 a second, each retry waits behind all those before
/// it, so the retries fall further behind as long as that lasts (no key is
/// dropped; the backlog is bounded by the failing keys, and drains at 10 a
/// second once failures slow). A controller that expects more failures than
/// that gives a limiter of its own (`ControllerBuilder::rate_limiter`), for
/// example an [`ExponentialBackoff`] alone.
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
        failures: Failures::default(),
    };
    MaxOf {
        limiters: vec![
            Box::new(backoff),
            Box::new(TokenBucket::new(PER_SECOND, BURST)),
        ],
    }
}
