//! Compact timestamps for the queue core: nanoseconds since the queue was
//! built, 8 bytes instead of an `Instant`'s 16. Every ready, scheduled and
//! in-flight key carries several, so this halves the core's memory per key.

use std::time::{Duration, Instant};

/// A point in time, in nanoseconds since the queue's epoch (584 years fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Stamp(pub(crate) u64);

impl Stamp {
    /// How long after `earlier` this is (zero if it is not after).
    pub(crate) fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - delay`, saturating at the epoch.
    pub(crate) fn before(self, delay: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `self + delay`, saturating.
    pub(crate) fn after(self, delay: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

/// Converts between instants and stamps for one queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch(Instant);

impl Epoch {
    /// An epoch a day before `now` where the clock allows: tokio's paused
    /// clock may run behind the real one, and a queue built on one and used
    /// on the other must still see time move.
    pub(crate) fn new(now: Instant) -> Self {
        const SLACK: Duration = Duration::from_secs(24 * 3600);
        Self(now.checked_sub(SLACK).unwrap_or(now))
    }

    pub(crate) fn stamp(self, at: Instant) -> Stamp {
        let nanos = at.saturating_duration_since(self.0).as_nanos();
        Stamp(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    pub(crate) fn instant(self, stamp: Stamp) -> Instant {
        crate::time::std_deadline(self.0, Duration::from_nanos(stamp.0))
    }
}
