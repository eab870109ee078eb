//! Configuration of a [`Manager`].

use std::fmt;
#[cfg(feature = "http")]
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use prometheus_client::registry::Registry;

use super::signals::Signals;
use super::{LeaderElector, Manager, ManagerError};

/// Configures a [`Manager`]; start from [`Manager::builder`].
#[must_use]
pub struct ManagerBuilder {
    #[cfg(feature = "http")]
    pub(super) http_address: Option<SocketAddr>,
    pub(super) grace: Duration,
    pub(super) sync_timeout: Duration,
    pub(super) elector: Option<Arc<dyn LeaderElector>>,
    pub(super) standby_ready: bool,
    pub(super) signals: Signals,
    pub(super) registry: Option<Registry>,
}

impl ManagerBuilder {
    pub(super) fn new() -> Self {
        Self {
            #[cfg(feature = "http")]
            http_address: None,
            grace: Duration::from_secs(30),
            sync_timeout: Duration::from_secs(120),
            elector: None,
            standby_ready: true,
            signals: Signals::Os,
            registry: None,
        }
    }

    /// Serves `/metrics`, `/healthz`, `/readyz` and `/debug/queues` on
    /// `address` (default: no server). Port 0 picks a free port: read it
    /// from [`Manager::http_address`].
    #[cfg(feature = "http")]
    pub fn http_address(mut self, address: SocketAddr) -> Self {
        self.http_address = Some(address);
        self
    }

    /// How long shutdown may take in all, from the first signal until every
    /// task has stopped, before the remaining tasks are aborted (default
    /// 30 s). Must not be zero; `Duration::MAX` means no limit. Each
    /// controller's own shutdown grace is cut to 80 % of this.
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.grace = timeout;
        self
    }

    /// How long `run` waits for every informer's first list before failing
    /// (default 2 minutes). Must not be zero; `Duration::MAX` waits for ever.
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// Runs controllers only while `elector` holds the leadership (default:
    /// always). Informers run either way (a warm standby).
    pub fn leader_election(mut self, elector: impl LeaderElector) -> Self {
        self.elector = Some(Arc::new(elector));
        self
    }

    /// Whether a standby (not leading) replica answers `/readyz` with ready
    /// (default `true`: it is healthy and ready to take over; set `false`
    /// when only the leader may receive traffic).
    pub fn standby_is_ready(mut self, ready: bool) -> Self {
        self.standby_ready = ready;
        self
    }

    /// Takes shutdown signals from `signals` instead of SIGTERM/SIGINT: the
    /// first item starts a graceful shutdown, the second forces it. For tests
    /// and for embedding in a program that handles signals itself.
    pub fn signals(mut self, signals: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.signals = Signals::Stream(signals.boxed());
        self
    }

    /// Ignores signals: only [`Manager::shutdown_token`] stops the manager.
    pub fn without_signals(mut self) -> Self {
        self.signals = Signals::Off;
        self
    }

    /// Registers the manager's metrics in `registry` (default: a new one),
    /// e.g. one made with a prefix or constant labels.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Builds the manager, binding the HTTP address if one was set (the
    /// server starts serving in [`Manager::run`]).
    ///
    /// # Errors
    ///
    /// [`ManagerError::InvalidConfig`] for a zero timeout;
    /// [`ManagerError::Http`] when the address cannot be bound.
    pub fn build(self) -> Result<Manager, ManagerError> {
        if self.grace.is_zero() {
            return Err(ManagerError::InvalidConfig {
                reason: "the graceful-shutdown timeout is zero".to_owned(),
            });
        }
        if self.sync_timeout.is_zero() {
            return Err(ManagerError::InvalidConfig {
                reason: "the sync timeout is zero".to_owned(),
            });
        }
        Manager::assemble(self)
    }
}

impl fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("ManagerBuilder");
        #[cfg(feature = "http")]
        s.field("http_address", &self.http_address);
        s.field("grace", &self.grace)
            .field("sync_timeout", &self.sync_timeout)
            .field("leader_election", &self.elector.as_ref().map(|e| e.name()))
            .field("standby_ready", &self.standby_ready)
            .field("signals", &self.signals)
            .finish_non_exhaustive()
    }
}
