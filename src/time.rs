//! Time arithmetic that saturates instead of panicking or wrapping on a huge
//! `Duration` (a common way to say "no limit") or a huge count.

use std::time::Duration;

/// About a century: later than anything a process waits for.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + after`, at most about a century ahead.
pub(crate) fn deadline(now: tokio::time::Instant, after: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(std_deadline(now.into_std(), after))
}

/// [`deadline`] for std instants.
pub(crate) fn std_deadline(now: std::time::Instant, after: Duration) -> std::time::Instant {
    now.checked_add(after.min(FAR))
        .or_else(|| now.checked_add(FAR / 100))
        .unwrap_or(now)
}

/// `nanos` nanoseconds; `Duration::MAX` when that does not fit.
pub(crate) fn from_nanos_saturating(nanos: u128) -> Duration {
    const PER_SECOND: u128 = 1_000_000_000;
    match u64::try_from(nanos / PER_SECOND) {
        // The remainder is below 10^9: it fits in a u32.
        Ok(seconds) => Duration::new(seconds, (nanos % PER_SECOND) as u32),
        Err(_) => Duration::MAX,
    }
}

/// `base × 2^doublings`, at most `cap`: exact for every `doublings` up to
/// `u32::MAX`, never wrapping.
pub(crate) fn doubled(base: Duration, doublings: u32, cap: Duration) -> Duration {
    let nanos = base.as_nanos();
    if nanos == 0 {
        return Duration::ZERO;
    }
    // A shift past the leading zeros would drop bits: the product is then
    // 2^127 ns or more, above any duration.
    if doublings >= nanos.leading_zeros() {
        return cap;
    }
    from_nanos_saturating(nanos << doublings).min(cap)
}

/// `delay × factor`, for `factor` in `0.0..=2.0` (clamped), saturating at
/// `Duration::MAX` and never zero unless `delay` is: the arithmetic of every
/// jitter, so that jitter neither overflows nor turns a wait into a hot loop.
pub(crate) fn scaled(delay: Duration, factor: f64) -> Duration {
    // Fixed point with 32 fractional bits, exact in u128: a duration is below
    // 2^94 ns and the factor at most 2^33.
    const ONE: f64 = 4_294_967_296.0;
    let fixed = (factor.clamp(0.0, 2.0) * ONE) as u128;
    let product = from_nanos_saturating((delay.as_nanos() * fixed) >> 32);
    product.max(delay.min(Duration::from_nanos(1)))
}

/// `period` scaled by a random factor in 0.9..1.1 (±10 %, from `unit` in
/// `0.0..1.0`), so that many timers do not fire in step.
pub(crate) fn jittered(period: Duration, unit: f64) -> Duration {
    scaled(period, 0.9 + 0.2 * unit)
}

/// Proptest strategies over the whole range of durations and counts.
#[cfg(test)]
pub(crate) mod strategies {
    use std::time::Duration;

    use proptest::prelude::*;

    /// Durations over the whole range, most of them far from both ends,
    /// with the ends themselves.
    pub(crate) fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::from_nanos(1)),
            Just(Duration::MAX),
            (0u32..=64, any::<u64>(), 0u32..1_000_000_000).prop_map(|(shift, seconds, nanos)| {
                Duration::new(seconds.checked_shr(shift).unwrap_or(0), nanos)
            }),
            (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        ]
    }

    /// Non-zero durations over the whole range.
    pub(crate) fn any_positive_duration() -> impl Strategy<Value = Duration> {
        any_duration().prop_map(|d| d.max(Duration::from_nanos(1)))
    }

    /// Counts over `0..=u32::MAX`, with the small ones and the end.
    pub(crate) fn any_count() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..200, any::<u32>(), Just(u32::MAX - 1), Just(u32::MAX)]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::strategies::{any_count, any_duration};
    use super::*;

    /// `base × 2^doublings` by repeated checked doubling.
    fn doubled_slowly(base: Duration, doublings: u32, cap: Duration) -> Duration {
        let mut nanos = base.as_nanos();
        for _ in 0..doublings.min(200) {
            nanos = nanos.saturating_mul(2);
        }
        from_nanos_saturating(nanos).min(cap)
    }

    proptest! {
        #[test]
        fn doubling_is_exact_capped_and_monotone(
            base in any_duration(),
            cap in any_duration(),
            doublings in any_count(),
        ) {
            let delay = doubled(base, doublings, cap);
            prop_assert_eq!(delay, doubled_slowly(base, doublings, cap));
            prop_assert!(delay <= cap);
            prop_assert!(delay <= doubled(base, doublings.saturating_add(1), cap));
        }

        #[test]
        fn scaling_stays_within_its_factor_and_never_reaches_zero(
            delay in any_duration(),
            factor in 0.0f64..=2.0,
        ) {
            let scaled = scaled(delay, factor);
            let nanos = delay.as_nanos() as f64;
            let (exact, got) = (nanos * factor, scaled.as_nanos() as f64);
            // At most the exact product (and the 1 ns floor), at least the
            // product by a factor rounded down to 2^-32 (and a nanosecond).
            prop_assert!(got <= exact * (1.0 + 1e-12) + 1.0, "{scaled:?} for {delay:?} × {factor}");
            prop_assert!(
                got >= exact - nanos / 4_294_967_296.0 - 1.0 || scaled == Duration::MAX,
                "{scaled:?} for {delay:?} × {factor}"
            );
            prop_assert_eq!(scaled.is_zero(), delay.is_zero());
        }

        #[test]
        fn a_jittered_period_is_within_ten_percent(
            period in any_duration(),
            unit in 0.0f64..1.0,
        ) {
            let jittered = jittered(period, unit);
            prop_assert!(jittered >= scaled(period, 0.9) && jittered <= scaled(period, 1.1));
            prop_assert_eq!(jittered.is_zero(), period.is_zero());
        }
    }

    #[test]
    fn scaling_by_one_is_the_identity() {
        for delay in [
            Duration::from_nanos(1),
            Duration::from_millis(7),
            Duration::MAX,
        ] {
            assert_eq!(scaled(delay, 1.0), delay);
        }
        assert_eq!(scaled(Duration::MAX, 2.0), Duration::MAX);
        assert_eq!(
            scaled(Duration::from_nanos(1), 0.5),
            Duration::from_nanos(1)
        );
    }
}
