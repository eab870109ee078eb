//! `EtcdServer`: one etcd child process.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use parking_lot::Mutex;
use tempfile::TempDir;

/// The environment variable naming the etcd binary.
const BIN_VAR: &str = "TEND_ETCD_BIN";

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
    /// Connecting a client failed.
    #[error("connecting to etcd failed")]
    Client(#[source] etcd_client::Error),
}

/// A real etcd server for tests; killed when dropped.
///
/// See the [module docs](super).
#[derive(Debug)]
pub struct EtcdServer {
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
        let binary = find_binary().ok_or(HarnessError::NotInstalled { hint: INSTALL_HINT })?;
        let dir = tempfile::Builder::new().prefix("tend-etcd-").tempdir()?;
        let mut data = fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut data, 0o700);
        data.create(dir.path().join("data"))?;
        let server = EtcdServer {
            binary,
            dir,
            client_address: free_address()?,
            peer_address: free_address()?,
            args: self.args,
            startup: self.startup.unwrap_or(Duration::from_secs(20)),
            child: Mutex::new(None),
        };
        server.restart().await?;
        Ok(server)
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
        self.kill();
        let log = fs::File::create(self.log_path())?;
        let child = Command::new(&self.binary)
            .arg("--name=tend-test")
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls=http://{}", self.peer_address))
            .arg(format!(
                "--initial-advertise-peer-urls=http://{}",
                self.peer_address
            ))
            .arg(format!(
                "--initial-cluster=tend-test=http://{}",
                self.peer_address
            ))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        *self.child.lock() = Some(child);
        self.wait_healthy().await
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    async fn wait_healthy(&self) -> Result<(), HarnessError> {
        let started = tokio::time::Instant::now();
        while started.elapsed() < self.startup {
            if !self.is_running() {
                break;
            }
            if let Ok(mut client) = connect(&self.endpoint()).await {
                if client.get("tend-health", None).await.is_ok() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(HarnessError::Unhealthy {
            waited: started.elapsed(),
            log: tail(&self.log_path()),
        })
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client of `endpoint` (e.g. a [`Proxy`](super::Proxy)'s) with short
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

fn find_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(BIN_VAR) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// A free loopback address (the port is released for etcd to take).
fn free_address() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
