//! Jittered exponential backoff that resets after a healthy period, and the
//! ±10 % jitter of the periodic timers.

use std::time::Duration;

use tokio::time::Instant;

/// Reconnect delays: `initial`, doubling up to `max`, each jittered by
/// ±20 % (never above `max`, never zero); back to `initial` once the
/// connection stayed healthy for `reset_after`.
///
/// The arithmetic saturates, so `Duration::MAX` works as "no maximum" and
/// as "never reset".
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    // Failures since the last reset.
    failures: u32,
    healthy_since: Option<Instant>,
    rng: fastrand::Rng,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Self {
            initial,
            max,
            reset_after,
            failures: 0,
            healthy_since: None,
            rng: fastrand::Rng::new(),
        }
    }

    /// Notes that a connection (list or watch) just succeeded.
    pub(crate) fn healthy(&mut self) {
        if self.healthy_since.is_none() {
            self.healthy_since = Some(Instant::now());
        }
    }

    /// The delay before the next attempt after a failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .healthy_since
            .take()
            .is_some_and(|since| now.duration_since(since) >= self.reset_after)
        {
            self.failures = 0;
        }
        let unit = self.rng.f64();
        let delay = self.delay_for(self.failures, unit);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// The delay after `failures` earlier failures, `unit` (in `0.0..1.0`)
    /// choosing the jitter.
    fn delay_for(&self, failures: u32, unit: f64) -> Duration {
        let delay = crate::time::doubled(self.initial, failures, self.max);
        crate::time::scaled(delay, 0.8 + 0.4 * unit).min(self.max)
    }
}

/// `period` jittered by ±10 %.
pub(crate) fn jittered(period: Duration, rng: &mut fastrand::Rng) -> Duration {
    crate::time::jittered(period, rng.f64())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::time::strategies::{any_count, any_positive_duration};

    /// An initial delay and a maximum not below it, over the whole range.
    fn initial_and_max() -> impl Strategy<Value = (Duration, Duration)> {
        (any_positive_duration(), any_positive_duration()).prop_map(|(a, b)| (a.min(b), a.max(b)))
    }

    proptest! {
        #[test]
        fn every_delay_is_within_twenty_percent_of_a_doubling_that_never_shrinks(
            (initial, max) in initial_and_max(),
            failures in any_count(),
            unit in 0.0f64..1.0,
        ) {
            let backoff = Backoff::new(initial, max, Duration::MAX);
            let nominal = crate::time::doubled(initial, failures, max);
            prop_assert!(nominal >= initial && nominal <= max);
            prop_assert!(nominal <= crate::time::doubled(initial, failures.saturating_add(1), max));
            let delay = backoff.delay_for(failures, unit);
            prop_assert!(!delay.is_zero() && delay <= max, "{delay:?}");
            let (got, nominal) = (delay.as_nanos() as f64, nominal.as_nanos() as f64);
            prop_assert!(got >= nominal * 0.8 * (1.0 - 1e-9) - 1.0, "{delay:?} below 80 %");
            prop_assert!(got <= nominal * 1.2 * (1.0 + 1e-9) + 1.0, "{delay:?} above 120 %");
        }

        #[test]
        fn failures_past_any_count_keep_the_delay_and_the_count(
            (initial, max) in initial_and_max(),
            failures in any_count(),
        ) {
            let mut backoff = Backoff::new(initial, max, Duration::MAX);
            backoff.failures = failures;
            for _ in 0..3 {
                let delay = backoff.next_delay();
                prop_assert!(!delay.is_zero() && delay <= max);
            }
            prop_assert_eq!(backoff.failures, failures.saturating_add(3));
        }
    }

    #[test]
    fn no_maximum_and_no_reset_work_from_the_first_failure() {
        let mut backoff = Backoff::new(Duration::MAX, Duration::MAX, Duration::MAX);
        for _ in 0..200 {
            let delay = backoff.next_delay();
            assert!(delay >= Duration::MAX.mul_f64(0.8), "{delay:?}");
        }
        let mut backoff = Backoff::new(Duration::from_nanos(1), Duration::MAX, Duration::MAX);
        for _ in 0..200 {
            assert!(!backoff.next_delay().is_zero());
        }
    }

    fn within(delay: Duration, expected_ms: u64) -> bool {
        let expected = Duration::from_millis(expected_ms);
        delay >= expected.mul_f64(0.8) && delay <= expected.mul_f64(1.2)
    }

    #[tokio::test(start_paused = true)]
    async fn delays_double_up_to_the_maximum_then_reset_after_a_healthy_period() {
        let mut backoff = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        );
        for expected in [800, 1_600, 3_200, 6_400, 12_800, 25_600] {
            let delay = backoff.next_delay();
            assert!(within(delay, expected), "{delay:?} vs {expected} ms");
        }
        for _ in 0..3 {
            assert!(backoff.next_delay() <= Duration::from_secs(30));
        }
        backoff.healthy();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            backoff.next_delay() >= Duration::from_secs(24),
            "not healthy long enough"
        );
        backoff.healthy();
        tokio::time::advance(Duration::from_secs(121)).await;
        assert!(within(backoff.next_delay(), 800), "reset after two minutes");
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..1_000 {
            let delay = jittered(Duration::from_secs(10), &mut rng);
            assert!(delay >= Duration::from_secs(9) && delay <= Duration::from_secs(11));
        }
    }
}
