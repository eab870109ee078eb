//! Jittered exponential backoff that resets after a healthy period, and the
//! ±10 % jitter of the periodic timers.

use std::time::Duration;

use tokio::time::Instant;

/// Reconnect delays: `initial`, doubling up to `max`, each jittered by
/// ±20 % (never above `max`); back to `initial` once the connection stayed
/// healthy for `reset_after`.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    current: Option<Duration>,
    healthy_since: Option<Instant>,
    rng: fastrand::Rng,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Self {
            initial,
            max,
            reset_after,
            current: None,
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
            self.current = None;
        }
        let delay = match self.current {
            None => self.initial,
            Some(current) => current.saturating_mul(2).min(self.max),
        };
        self.current = Some(delay);
        delay.mul_f64(0.8 + 0.4 * self.rng.f64()).min(self.max)
    }
}

/// `period` jittered by ±10 %.
pub(crate) fn jittered(period: Duration, rng: &mut fastrand::Rng) -> Duration {
    crate::time::jittered(period, rng.f64())
}

#[cfg(test)]
mod tests {
    use super::*;

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
