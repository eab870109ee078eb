//! Deadlines that saturate instead of panicking on a huge `Duration` (a
//! common way to say "no limit").

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

/// `period` scaled by a random factor in 0.9..1.1 (±10 %, from `unit` in
/// `0.0..1.0`), so that many timers do not fire in step; `period` itself if
/// the product does not fit.
pub(crate) fn jittered(period: Duration, unit: f64) -> Duration {
    Duration::try_from_secs_f64(period.as_secs_f64() * (0.9 + 0.2 * unit)).unwrap_or(period)
}
