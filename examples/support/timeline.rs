//! The clock an example's logs are stamped with, and the timeline it
//! plays on it.

use std::time::Duration;

use tend::CancellationToken;
use tokio::time::Instant;

/// The time since the example started, for its log lines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn start() -> Self {
        Self(Instant::now())
    }

    /// `[  1.23s]`
    pub(crate) fn stamp(self) -> String {
        format!("[{:>6.2}s]", self.0.elapsed().as_secs_f64())
    }

    /// Sleeps until `fraction` of `duration` has passed since the start
    /// (forever when the example runs forever).
    pub(crate) async fn at(self, duration: Option<Duration>, fraction: f64) {
        match duration {
            Some(duration) => tokio::time::sleep_until(self.0 + duration.mul_f64(fraction)).await,
            None => std::future::pending().await,
        }
    }
}

/// Plays an example's timeline until it ends or `stop` is cancelled (the
/// manager cancels it on SIGINT or SIGTERM, so Ctrl-C ends a `--forever`
/// run with its summary), then cancels `stop`.
pub(crate) async fn play<E>(
    stop: &CancellationToken,
    timeline: impl Future<Output = Result<(), E>>,
) -> Result<(), E> {
    let played = tokio::select! {
        played = timeline => played,
        () = stop.cancelled() => Ok(()),
    };
    stop.cancel();
    played
}
