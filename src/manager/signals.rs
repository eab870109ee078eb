//! Shutdown signals: the process's SIGTERM/SIGINT, or a stream a test drives.

use std::fmt;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::ManagerError;

/// Where shutdown signals come from.
pub(super) enum Signals {
    /// SIGTERM and SIGINT (Ctrl-C elsewhere than Unix).
    Os,
    /// One item per signal.
    Stream(BoxStream<'static, ()>),
    /// None: only [`Manager::shutdown_token`](super::Manager::shutdown_token).
    Off,
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Os => "Os",
            Self::Stream(_) => "Stream",
            Self::Off => "Off",
        })
    }
}

impl Signals {
    /// Installs the handlers (for [`Signals::Os`]); must run inside the
    /// runtime.
    pub(super) fn into_stream(self) -> Result<Option<BoxStream<'static, ()>>, ManagerError> {
        match self {
            Self::Os => os_signals().map(Some).map_err(ManagerError::Signals),
            Self::Stream(stream) => Ok(Some(stream)),
            Self::Off => Ok(None),
        }
    }
}

/// The first signal cancels `stop` (graceful shutdown), the second cancels
/// `force`.
///
/// # Cancel safety
///
/// Cancel safe.
pub(super) async fn watch(
    mut signals: BoxStream<'static, ()>,
    stop: CancellationToken,
    force: CancellationToken,
) {
    if signals.next().await.is_none() {
        return;
    }
    tracing::info!("shutdown signal received, stopping gracefully (a second signal forces it)");
    stop.cancel();
    if signals.next().await.is_some() {
        tracing::warn!("second shutdown signal received, forcing shutdown");
        force.cancel();
    }
}

#[cfg(unix)]
fn os_signals() -> std::io::Result<BoxStream<'static, ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate())?;
    let interrupt = signal(SignalKind::interrupt())?;
    let stream = futures::stream::unfold(
        (terminate, interrupt),
        |(mut terminate, mut interrupt)| async move {
            let received = tokio::select! {
                r = terminate.recv() => r,
                r = interrupt.recv() => r,
            };
            received.map(|()| ((), (terminate, interrupt)))
        },
    );
    Ok(stream.boxed())
}

#[cfg(not(unix))]
fn os_signals() -> std::io::Result<BoxStream<'static, ()>> {
    let stream = futures::stream::unfold((), |()| async {
        tokio::signal::ctrl_c().await.ok().map(|()| ((), ()))
    });
    Ok(stream.boxed())
}
