//! Public behaviour of the rate limiters, on tokio's paused clock.

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use tend::rate_limit::{
    ExponentialBackoff, FastSlow, MaxOf, RateLimitError, RateLimiter, TokenBucket,
    default_rate_limiter,
};
use tokio::time::advance;

const MS: Duration = Duration::from_millis(1);

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

#[test]
fn exponential_backoff_doubles_from_the_base_up_to_the_cap() {
    let backoff = ExponentialBackoff::new(5 * MS, Duration::from_secs(1000)).expect("valid");
    let delays: Vec<_> = (0..5).map(|_| backoff.when(&"k")).collect();
    assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS]);
    assert_eq!(backoff.retries(&"k"), 5);
    // 5 ms × 2^18 = 1310.72 s: capped from the 19th failure on.
    let late: Vec<_> = (5..30).map(|_| backoff.when(&"k")).collect();
    assert_eq!(late[12], Duration::from_millis(5 << 17));
    assert!(late[13..].iter().all(|d| *d == Duration::from_secs(1000)));
}

#[test]
fn exponential_backoff_never_overflows() {
    let backoff = ExponentialBackoff::new(Duration::from_secs(1), Duration::MAX).expect("valid");
    let mut last = Duration::ZERO;
    for _ in 0..300 {
        last = backoff.when(&1u8);
    }
    assert!(last >= Duration::from_secs(1 << 40));
}

#[test]
fn no_cap_with_full_jitter_never_panics() {
    let backoff = ExponentialBackoff::new(Duration::MAX, Duration::MAX)
        .expect("valid")
        .jitter(1.0)
        .expect("valid jitter");
    for _ in 0..3 {
        assert_eq!(backoff.when(&0u8), Duration::MAX);
    }
}

#[test]
fn a_jittered_backoff_without_a_cap_grows_past_sixty_four_failures() {
    let backoff = ExponentialBackoff::new(Duration::from_secs(1), Duration::MAX)
        .expect("valid")
        .jitter(0.1)
        .expect("valid jitter");
    let mut floor = Duration::from_secs(1);
    for failure in 0..200u32 {
        let delay = backoff.when(&0u8);
        assert!(
            delay >= floor,
            "failure {failure}: {delay:?} below {floor:?}"
        );
        floor = floor.saturating_mul(2);
    }
}

#[test]
fn a_huge_base_never_wraps_to_a_zero_delay() {
    // 2^64 ns: the 64th doubling once shifted every bit out of a u128.
    let base = Duration::new(18_446_744_073, 709_551_616);
    let backoff = ExponentialBackoff::new(base, Duration::MAX).expect("valid");
    let mut last = Duration::ZERO;
    for failure in 0..200u32 {
        let delay = backoff.when(&0u8);
        assert!(
            delay >= base && delay >= last,
            "failure {failure}: {delay:?}"
        );
        last = delay;
    }
    assert_eq!(last, Duration::MAX);
}

#[test]
fn forget_resets_one_key_only() {
    let backoff = ExponentialBackoff::new(5 * MS, Duration::from_secs(1)).expect("valid");
    backoff.when(&"a");
    backoff.when(&"a");
    backoff.when(&"b");
    backoff.forget(&"a");
    assert_eq!(backoff.retries(&"a"), 0);
    assert_eq!(backoff.when(&"a"), 5 * MS);
    assert_eq!(backoff.when(&"b"), 10 * MS);
}

#[test]
fn jitter_stays_between_the_delay_and_the_fraction_above_it() {
    let backoff = ExponentialBackoff::new(100 * MS, Duration::from_secs(10))
        .expect("valid")
        .jitter(0.5)
        .expect("valid jitter");
    for i in 0..200u32 {
        let delay = backoff.when(&i);
        assert!((100 * MS..=150 * MS).contains(&delay), "{delay:?}");
    }
}

#[test]
fn bad_backoff_configuration_is_a_typed_error() {
    assert_eq!(
        ExponentialBackoff::<u8>::new(Duration::ZERO, Duration::from_secs(1)).unwrap_err(),
        RateLimitError::ZeroBase
    );
    let err =
        ExponentialBackoff::<u8>::new(Duration::from_secs(2), Duration::from_secs(1)).unwrap_err();
    assert_eq!(
        err,
        RateLimitError::BaseAboveCap {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(1)
        }
    );
    assert_eq!(err.to_string(), "backoff base delay 2s exceeds its cap 1s");
    for bad in [-0.1, 1.5, f64::NAN] {
        let backoff = ExponentialBackoff::<u8>::new(MS, Duration::from_secs(1)).expect("valid");
        assert!(matches!(
            backoff.jitter(bad),
            Err(RateLimitError::InvalidJitter(_))
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn the_bucket_allows_a_burst_then_spaces_attempts_at_its_rate() {
    let bucket = TokenBucket::new(nz(10), nz(100));
    for i in 0..100u32 {
        assert_eq!(
            bucket.when(&i),
            Duration::ZERO,
            "attempt {i} is in the burst"
        );
    }
    assert_eq!(bucket.when(&100u32), 100 * MS);
    assert_eq!(bucket.when(&101u32), 200 * MS);
    assert_eq!(RateLimiter::<u32>::retries(&bucket, &1), 0);
}

#[tokio::test(start_paused = true)]
async fn the_bucket_refills_at_its_rate_up_to_the_burst() {
    let bucket = TokenBucket::new(nz(10), nz(5));
    for _ in 0..5 {
        assert_eq!(bucket.when(&0u8), Duration::ZERO);
    }
    assert_eq!(bucket.when(&0u8), 100 * MS);
    // That reservation is served at 100 ms; one second later 10 tokens have
    // refilled, but the bucket holds only 5.
    advance(Duration::from_millis(1100)).await;
    for _ in 0..5 {
        assert_eq!(bucket.when(&0u8), Duration::ZERO);
    }
    assert_eq!(bucket.when(&0u8), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_rate_that_does_not_divide_a_second_stays_exact() {
    let bucket = TokenBucket::new(nz(3), nz(1));
    let delays: Vec<_> = (0..4).map(|_| bucket.when(&0u8)).collect();
    let third = Duration::from_nanos(333_333_334);
    assert_eq!(
        delays,
        [
            Duration::ZERO,
            third,
            Duration::from_nanos(666_666_667),
            Duration::from_secs(1)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_above_a_billion_per_second_still_limits() {
    let bucket = TokenBucket::new(nz(u32::MAX), nz(1));
    let delays: Vec<_> = (0..1000).map(|_| bucket.when(&0u8)).collect();
    assert_eq!(delays[1], Duration::from_nanos(1));
    // 999 tokens at 2^32 - 1 per second: 232.6 ns, rounded up.
    assert_eq!(delays[999], Duration::from_nanos(233));
    assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
}

#[test]
fn the_bucket_paces_every_rate_and_burst_exactly() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let rates = prop_oneof![1u32..100, any::<u32>(), Just(u32::MAX)].prop_map(nz);
    let bursts = prop_oneof![1u32..100, any::<u32>(), Just(u32::MAX)].prop_map(nz);
    proptest!(|(per_second in rates, burst in bursts, attempts in 0usize..300)| {
        runtime.block_on(async {
            let bucket = TokenBucket::new(per_second, burst);
            for attempt in 0..attempts {
                // The attempt-th token is due attempt / per_second from now;
                // the burst tolerates burst - 1 of them early.
                let early = u128::try_from(attempt).unwrap().saturating_sub(u128::from(burst.get() - 1));
                let nanos = (early * 1_000_000_000).div_ceil(u128::from(per_second.get()));
                let want = Duration::from_nanos(u64::try_from(nanos).unwrap());
                prop_assert_eq!(bucket.when(&0u8), want, "attempt {}", attempt);
            }
            Ok(())
        })?;
    });
}

#[test]
fn fast_slow_switches_after_the_fast_attempts() {
    let limiter = FastSlow::new(5 * MS, Duration::from_secs(10), nz(3)).expect("valid");
    let delays: Vec<_> = (0..5).map(|_| limiter.when(&"k")).collect();
    assert_eq!(
        delays,
        [
            5 * MS,
            5 * MS,
            5 * MS,
            Duration::from_secs(10),
            Duration::from_secs(10)
        ]
    );
    limiter.forget(&"k");
    assert_eq!(limiter.when(&"k"), 5 * MS);
}

#[test]
fn max_of_takes_the_longest_delay_and_records_in_every_limiter() {
    let limiter = MaxOf::new(vec![
        Box::new(ExponentialBackoff::new(MS, Duration::from_secs(1)).expect("valid")),
        Box::new(FastSlow::new(3 * MS, Duration::from_secs(1), nz(2)).expect("valid")),
    ])
    .expect("two limiters");
    let delays: Vec<_> = (0..4).map(|_| limiter.when(&"k")).collect();
    assert_eq!(
        delays,
        [
            3 * MS,
            3 * MS,
            Duration::from_secs(1),
            Duration::from_secs(1)
        ]
    );
    assert_eq!(limiter.retries(&"k"), 4);
    limiter.forget(&"k");
    assert_eq!(limiter.retries(&"k"), 0);
}

#[test]
fn a_fast_slow_limiter_with_a_zero_fast_delay_is_refused() {
    let err = FastSlow::<u8>::new(Duration::ZERO, Duration::from_secs(1), nz(3)).unwrap_err();
    assert_eq!(err, RateLimitError::ZeroBase);
}

#[test]
fn a_fast_slow_limiter_with_fast_above_slow_is_refused() {
    let err =
        FastSlow::<u8>::new(Duration::from_secs(2), Duration::from_secs(1), nz(3)).unwrap_err();
    assert_eq!(
        err,
        RateLimitError::BaseAboveCap {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(1)
        }
    );
    assert!(
        FastSlow::<u8>::new(MS, MS, nz(3)).is_ok(),
        "equal delays are fine"
    );
}

#[test]
fn a_maximum_of_no_limiters_is_refused() {
    let err = MaxOf::<u8>::new(Vec::new()).unwrap_err();
    assert_eq!(err, RateLimitError::NoLimiters);
    assert_eq!(
        err.to_string(),
        "a maximum of rate limiters needs at least one limiter"
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_limiter_is_backoff_and_bucket_combined() {
    let limiter = default_rate_limiter::<String>();
    let key = String::from("k");
    assert_eq!(limiter.when(&key), 5 * MS);
    assert_eq!(limiter.when(&key), 10 * MS);
    // 98 more distinct keys empty the burst of 100; then the bucket's 100 ms
    // spacing dominates a fresh key's 5 ms backoff.
    for i in 0..98u32 {
        limiter.when(&i.to_string());
    }
    assert_eq!(limiter.when(&String::from("fresh")), 100 * MS);
}
