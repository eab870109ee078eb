//! `EtcdServer`: one etcd child process.

use std::ffi::OsString;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use parking_lot::Mutex;
use tempfile::TempDir;

use crate::testing::exec::{find_binary, log_tail};

/// The environment variable naming the etcd binary.
const BIN_VAR: &str = "TEND_ETCD_BIN";

/// How many times a first start is tried on new ports when etcd exits
/// early (its port was taken in the meantime) or another server answers.
const START_ATTEMPTS: u32 = 5;

/// How long one health probe (connect, read, member list) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Numbers the servers of this process, for unique member names.
static SERVERS: AtomicU64 = AtomicU64::new(0);

const INSTALL_HINT: &str = "install it with `apt-get install -y etcd-server` (Debian, Ubuntu) \
    or from https://github.com/etcd-io/etcd/releases, or point TEND_ETCD_BIN at the binary";

/// Why an [`EtcdServer`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No etcd binary was found.
    #[error("no `etcd` binary found on the PATH or in TEND_ETCD_BIN: {hint}")]
    NotInstalled {
        /// How to install one.
        hint: &'static str,
    },
    /// The binary could not be run, or a temporary directory made.
    #[error("starting etcd failed")]
    Io(#[from] std::io::Error),
    /// etcd exited, or did not serve within the startup timeout.
    #[error("etcd did not become healthy within {waited:?}; its log ends with:\n{log}")]
    Unhealthy {
        /// How long was waited.
        waited: Duration,
        /// The end of etcd's output.
        log: String,
    },
    /// Another etcd answered on this server's client address (this one
    /// could not bind it).
    #[error("another etcd answers on {address} (expected member `{expected}`)")]
    NotOurs {
        /// The client address.
        address: SocketAddr,
        /// This server's member name.
        expected: String,
    },
    /// Connecting a client failed.
    #[error("connecting to etcd failed")]
    Client(#[source] etcd_client::Error),
}

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
#[derive(Debug)]
pub struct EtcdServer {
    name: String,
    binary: PathBuf,
    /// Holds the data dir and the log; removed on drop.
    dir: TempDir,
    client_address: SocketAddr,
    peer_address: SocketAddr,
    args: Vec<OsString>,
    startup: Duration,
    child: Mutex<Option<Child>>,
}

/// Configures an [`EtcdServer`]; from [`EtcdServer::builder`].
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EtcdServerBuilder {
    args: Vec<OsString>,
    startup: Option<Duration>,
}

impl EtcdServerBuilder {
    /// Passes an extra argument to etcd (e.g.
    /// `--experimental-watch-progress-notify-interval=1s`).
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long to wait for etcd to serve (default 20 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup = Some(timeout);
        self
    }

    /// Starts the server and waits until it serves.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotInstalled`] (with how to install etcd),
    /// [`HarnessError::Io`] or [`HarnessError::Unhealthy`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the server.
    pub async fn start(self) -> Result<EtcdServer, HarnessError> {
        let binary = find_binary(BIN_VAR, "etcd")
            .ok_or(HarnessError::NotInstalled { hint: INSTALL_HINT })?;
        let startup = self.startup.unwrap_or(Duration::from_secs(20));
        let mut attempt = 1;
        loop {
            let (server, ports) = EtcdServer::prepare(binary.clone(), self.args.clone(), startup)?;
            match server.launch(Some(ports)).await {
                Ok(()) => return Ok(server),
                Err(error) if attempt < START_ATTEMPTS && server.lost_its_ports(&error) => {
                    tracing::debug!(%error, attempt, "etcd did not start, trying new ports");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// The two listeners that hold a server's ports until it is spawned.
struct Ports {
    client: TcpListener,
    peer: TcpListener,
}

impl Ports {
    /// Two distinct free loopback ports, held open.
    fn bind() -> std::io::Result<Self> {
        Ok(Self {
            client: TcpListener::bind("127.0.0.1:0")?,
            peer: TcpListener::bind("127.0.0.1:0")?,
        })
    }
}

impl EtcdServer {
    /// A server on two held free ports, with a fresh data directory, not
    /// started.
    fn prepare(
        binary: PathBuf,
        args: Vec<OsString>,
        startup: Duration,
    ) -> Result<(Self, Ports), HarnessError> {
        let dir = tempfile::Builder::new().prefix("tend-etcd-").tempdir()?;
        let mut data = fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut data, 0o700);
        data.create(dir.path().join("data"))?;
        let ports = Ports::bind()?;
        let number = SERVERS.fetch_add(1, Ordering::Relaxed);
        let server = Self {
            name: format!("tend-{}-{number}", std::process::id()),
            binary,
            dir,
            client_address: ports.client.local_addr()?,
            peer_address: ports.peer.local_addr()?,
            args,
            startup,
            child: Mutex::new(None),
        };
        Ok((server, ports))
    }

    /// Whether a failed start is worth trying again on new ports: etcd
    /// exited (its port was taken once released), or another etcd answered.
    fn lost_its_ports(&self, error: &HarnessError) -> bool {
        match error {
            HarnessError::NotOurs { .. } => true,
            HarnessError::Unhealthy { .. } => !self.is_running(),
            _ => false,
        }
    }

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
        format!("http://{}", self.client_address)
    }

    /// The client address.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.client_address
    }

    /// The data directory (kept across [`restart`](Self::restart)s).
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A client connected to this server, with short connect and
    /// keep-alive timeouts (so that a dead server is noticed in seconds).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Client`] when connecting fails.
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
        self.child
            .lock()
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills the server with SIGKILL (as a crash) and waits for it to exit.
    /// Its data stays for [`restart`](Self::restart).
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again (killing it first if it runs) on the same
    /// ports and data directory, and waits until it serves.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] or [`HarnessError::Unhealthy`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server starting.
    pub async fn restart(&self) -> Result<(), HarnessError> {
        self.launch(None).await
    }

    /// Kills the server if it runs, spawns it (releasing `ports` right
    /// before) and waits until it serves.
    async fn launch(&self, ports: Option<Ports>) -> Result<(), HarnessError> {
        self.kill();
        let log = fs::File::create(self.log_path())?;
        let mut command = Command::new(&self.binary);
        command
            .arg(format!("--name={}", self.name))
            .arg(format!("--initial-cluster-token={}-cluster", self.name))
            .arg(format!("--data-dir={}", self.data_dir().display()))
            // `connect` pings every second; etcd's default minimum (5 s)
            // would answer with GOAWAY `too_many_pings` on idle connections.
            .arg("--grpc-keepalive-min-time=500ms")
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls=http://{}", self.peer_address))
            .arg(format!(
                "--initial-advertise-peer-urls=http://{}",
                self.peer_address
            ))
            .arg(format!(
                "--initial-cluster={}=http://{}",
                self.name, self.peer_address
            ))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        drop(ports);
        let child = command.spawn()?;
        *self.child.lock() = Some(child);
        self.wait_healthy().await
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Probes until etcd serves as this member, the process exits, or the
    /// startup budget is spent.
    async fn wait_healthy(&self) -> Result<(), HarnessError> {
        // Real time, not tokio's: under a paused clock tokio's time does not
        // pass while etcd boots (see "Time" in the type's docs).
        let started = std::time::Instant::now();
        while started.elapsed() < self.startup {
            if !self.is_running() {
                break;
            }
            let left = self.startup.saturating_sub(started.elapsed());
            match tokio::time::timeout(PROBE_TIMEOUT.min(left), self.probe()).await {
                Ok(Ok(true)) if self.is_running() => return Ok(()),
                Ok(Ok(false)) => {
                    return Err(HarnessError::NotOurs {
                        address: self.client_address,
                        expected: self.name.clone(),
                    });
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(HarnessError::Unhealthy {
            waited: started.elapsed(),
            log: log_tail(&self.log_path()),
        })
    }

    /// One health probe: whether etcd serves reads, and whether the member
    /// answering is this server.
    async fn probe(&self) -> Result<bool, HarnessError> {
        let mut client = connect(&self.endpoint()).await?;
        client
            .get("tend-health", None)
            .await
            .map_err(HarnessError::Client)?;
        let members = client.member_list().await.map_err(HarnessError::Client)?;
        Ok(members
            .members()
            .iter()
            .any(|member| member.name() == self.name))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client of `endpoint` (e.g. a [`Proxy`](crate::testing::Proxy)'s) with short
/// connect and keep-alive timeouts, so that a dead or cut-off server is
/// noticed within seconds.
///
/// # Errors
///
/// [`HarnessError::Client`] when connecting fails.
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn connect(endpoint: &str) -> Result<Client, HarnessError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Client::connect([endpoint], Some(options))
        .await
        .map_err(HarnessError::Client)
}
