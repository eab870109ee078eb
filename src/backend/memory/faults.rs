//! Seeded, reproducible fault injection for watch streams.

use std::num::NonZeroUsize;
use std::time::Duration;

use super::error::FaultError;

/// What the memory backend does wrong on purpose, for tests.
///
/// Each watch stream draws its faults from its own random generator, seeded
/// from [`seed`](Faults::seed) and the number of watches opened before it, so
/// a test that makes the same calls sees the same faults. Bookmarks are never
/// dropped, duplicated or reordered.
///
/// ```
/// use std::num::NonZeroUsize;
/// use tend::memory::Faults;
///
/// let faults = Faults {
///     seed: 7,
///     drop: 0.3,
///     duplicate: 0.05,
///     reorder: 0.05,
///     cut_after: NonZeroUsize::new(1_000),
///     delay: Some(std::time::Duration::from_millis(50)),
/// };
/// assert!(faults.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Seed of the random generators.
    pub seed: u64,
    /// Probability that a watch event is silently dropped.
    pub drop: f64,
    /// Probability that a watch event is delivered twice.
    pub duplicate: f64,
    /// Probability that a watch event is held back and delivered after the
    /// next one.
    pub reorder: f64,
    /// Cut every watch (an injected error, then the end of the stream) after
    /// it delivered this many events.
    pub cut_after: Option<NonZeroUsize>,
    /// Delay each run of changes a watch reads from the history by a random
    /// time up to this long (tokio's clock): a slow watch, whose informer's
    /// cache lags the writes. Changes stay in order.
    pub delay: Option<Duration>,
}

impl Faults {
    /// Checks that every probability is within `0.0..=1.0`.
    ///
    /// # Errors
    ///
    /// [`FaultError::InvalidProbability`] naming the first bad field.
    pub fn validate(&self) -> Result<(), FaultError> {
        for (name, value) in [
            ("drop", self.drop),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultError::InvalidProbability { name, value });
            }
        }
        Ok(())
    }

    /// Whether this configuration injects anything into watch streams.
    pub(super) fn is_active(&self) -> bool {
        self.drop > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
            || self.cut_after.is_some()
            || self.delay.is_some_and(|delay| !delay.is_zero())
    }
}

/// What a fault roll decided for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Drop,
    Deliver { copies: usize, hold: bool },
}

/// The per-stream fault generator.
#[derive(Debug)]
pub(super) struct FaultRoller {
    faults: Faults,
    rng: fastrand::Rng,
}

impl FaultRoller {
    pub(super) fn new(faults: Faults, stream_number: u64) -> Self {
        let seed = faults.seed ^ stream_number.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Self {
            faults,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    pub(super) fn cut_after(&self) -> Option<usize> {
        self.faults.cut_after.map(NonZeroUsize::get)
    }

    /// How long to hold back the next run of changes, if at all.
    pub(super) fn delay(&mut self) -> Option<Duration> {
        let most = self.faults.delay.filter(|d| !d.is_zero())?;
        let nanos = u64::try_from(most.as_nanos()).unwrap_or(u64::MAX);
        Some(Duration::from_nanos(self.rng.u64(0..=nanos)))
    }

    pub(super) fn roll(&mut self, may_hold: bool) -> Fate {
        if self.chance(self.faults.drop) {
            return Fate::Drop;
        }
        let copies = if self.chance(self.faults.duplicate) {
            2
        } else {
            1
        };
        let hold = may_hold && self.chance(self.faults.reorder);
        Fate::Deliver { copies, hold }
    }

    fn chance(&mut self, probability: f64) -> bool {
        probability > 0.0 && self.rng.f64() < probability
    }
}
