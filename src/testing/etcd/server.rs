//! `EtcdServer`: one etcd for a test, and its builder.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::Client;
use tempfile::TempDir;

use super::connect;
use crate::testing::HarnessError;
use crate::testing::exec::Budget;
use crate::testing::launcher::{self, ETCD, EtcdProcess, EtcdSetup};
use crate::testing::process::DiesWith;

/// Numbers the servers of this process, for unique member names.
static SERVERS: AtomicU64 = AtomicU64::new(0);

/// A real etcd server for tests; killed when dropped.
///
/// See the [module docs](super). Each server is a single-member cluster
/// with its own member name (`tend-{test process id}-{n}`) and cluster
/// token on two free loopback ports; after its health check, the harness
/// confirms that the process still runs and that the member answering is
/// this one, and a first start whose ports were taken in the meantime is
/// tried again on new ports.
///
/// # Time
///
/// The startup budget ([`EtcdServerBuilder::startup_timeout`]) is measured
/// in real time (`std::time::Instant`), so that it holds under tokio's
/// paused clock (`start_paused`), where tokio's clock would not advance
/// while etcd boots. The etcd client's own timeouts (connect, keep-alive)
/// are tokio timers, which a paused clock fires early: tests that talk to
/// etcd should not pause the clock.
///
/// # Stray processes
///
/// The server is killed on drop, also when a test panics. A test binary
/// that is itself killed with SIGKILL (or aborts) runs no drop: its etcd
/// keeps running, and its temporary directory stays. Find it by its member
/// name, which carries the test process's id (`--name=tend-{pid}-{n}`).
///
/// # Examples
///
/// ```
/// use tend::testing::etcd::EtcdServer;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = EtcdServer::start().await?;
/// let mut client = server.client().await?;
/// client.put("greeting", "hello", None).await?;
///
/// server.kill(); // as a crash
/// assert!(!server.is_running());
/// server.restart().await?; // same data directory, same address
/// let mut client = server.client().await?;
/// let stored = client.get("greeting", None).await?;
/// assert_eq!(stored.kvs()[0].value(), b"hello");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EtcdServer {
    /// Dropped (killed) before its directory is removed.
    etcd: EtcdProcess,
    startup: Duration,
    /// Holds the data dir and the log; removed on drop.
    dir: TempDir,
}

/// Configures an [`EtcdServer`]; from [`EtcdServer::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::testing::etcd::EtcdServer;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = EtcdServer::builder()
///     .arg("--quota-backend-bytes=4294967296") // room for a large test
///     .startup_timeout(Duration::from_secs(30))
///     .start()
///     .await?;
/// assert!(server.is_running());
/// assert_eq!(server.endpoint(), format!("http://{}", server.address()));
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EtcdServerBuilder {
    args: Vec<OsString>,
    startup: Option<Duration>,
}

impl EtcdServerBuilder {
    /// Passes an extra argument to etcd (e.g.
    /// `--experimental-watch-progress-notify-interval=1s`), after the
    /// harness's own. The harness probes etcd's health through its JSON
    /// gateway: leave `--enable-grpc-gateway` on.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long, in real time, starting may take, tries on new ports
    /// included (default 20 s); also the budget of each
    /// [`EtcdServer::restart`].
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup = Some(timeout);
        self
    }

    /// Starts the server and waits until it serves.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotInstalled`] (saying where it looked and how to
    /// install etcd), [`HarnessError::Io`], [`HarnessError::Unhealthy`]
    /// with the end of etcd's log, or [`HarnessError::NotOurs`] when
    /// another etcd answered on every try.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the server.
    pub async fn start(self) -> Result<EtcdServer, HarnessError> {
        let binary = ETCD.find(None)?;
        let startup = self.startup.unwrap_or(Duration::from_secs(20));
        let dir = tempfile::Builder::new()
            .prefix("tend-etcd-")
            .tempdir()
            .map_err(HarnessError::io("making a temporary directory"))?;
        let number = SERVERS.fetch_add(1, Ordering::Relaxed);
        let setup = EtcdSetup {
            binary,
            dir: dir.path().to_owned(),
            name: format!("tend-{}-{number}", std::process::id()),
            extra_args: self.args,
            dies_with: DiesWith::Owner,
        };
        let etcd = EtcdProcess::start(&setup, Budget::starting_now(startup)).await?;
        Ok(EtcdServer { etcd, startup, dir })
    }
}

impl EtcdServer {
    /// Starts a server with the default settings.
    ///
    /// # Errors
    ///
    /// As [`EtcdServerBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the server.
    pub async fn start() -> Result<Self, HarnessError> {
        Self::builder().start().await
    }

    /// Starts configuring a server.
    pub fn builder() -> EtcdServerBuilder {
        EtcdServerBuilder::default()
    }

    /// The client URL, `http://127.0.0.1:{port}`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        self.etcd.url()
    }

    /// The client address.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.etcd.address()
    }

    /// The data directory (kept across [`restart`](Self::restart)s).
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        launcher::data_dir(self.dir.path())
    }

    /// A client connected to this server, with short connect and
    /// keep-alive timeouts (so that a dead server is noticed in seconds).
    ///
    /// # Errors
    ///
    /// [`HarnessError::EtcdClient`] when connecting fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn client(&self) -> Result<Client, HarnessError> {
        connect(&self.endpoint()).await
    }

    /// Whether the process is running.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.etcd.is_running()
    }

    /// Kills the server with SIGKILL (as a crash) and waits for it to exit.
    /// Its data stays for [`restart`](Self::restart).
    pub fn kill(&self) {
        self.etcd.kill();
    }

    /// Starts the server again (killing it first if it runs) on the same
    /// ports and data directory, and waits until it serves.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`], [`HarnessError::Unhealthy`], or
    /// [`HarnessError::NotOurs`] if another etcd took its port meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server starting.
    pub async fn restart(&self) -> Result<(), HarnessError> {
        self.etcd.restart(Budget::starting_now(self.startup)).await
    }
}
