//! The one etcd launcher of the harnesses: `testing::etcd`'s `EtcdServer`
//! and the etcd of `testing::kube`'s control plane are each an
//! [`EtcdProcess`]. It finds the binary ([`ETCD`]), picks two free ports on
//! 127.0.0.1 at run time, starts a single-member cluster with its data in a
//! fresh directory, probes its health over the JSON gateway (HTTP, so no
//! etcd client: it builds under either feature), and kills it when dropped.

use std::ffi::OsString;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::HarnessError;
use super::exec::{Binary, Budget, free_port};
use super::gateway;
use super::process::{DiesWith, Process};

/// The etcd binary: `$TEND_ETCD_BIN`, else `etcd` on the `PATH`.
pub(crate) const ETCD: Binary = Binary {
    name: "etcd",
    var: "TEND_ETCD_BIN",
    hint: "install it with `apt-get install -y etcd-server` (Debian, Ubuntu) \
        or from https://github.com/etcd-io/etcd/releases (envtest's directory has one too), \
        or point TEND_ETCD_BIN at the binary",
};

/// How many times etcd is started on new ports when it exits early (its
/// port was taken in the meantime) or another etcd answers there.
const START_ATTEMPTS: u32 = 5;

/// The pause between two health probes.
const PROBE_PAUSE: Duration = Duration::from_millis(50);

/// What an etcd is started with.
#[derive(Debug)]
pub(crate) struct EtcdSetup {
    /// From [`ETCD`]'s `find`.
    pub(crate) binary: PathBuf,
    /// Holds its data (`etcd/`) and its log (`etcd.log`, appended to).
    pub(crate) dir: PathBuf,
    /// Its member name, unique among the etcds that may run on this host.
    pub(crate) name: String,
    /// Passed after the launcher's own flags.
    pub(crate) extra_args: Vec<OsString>,
    /// What else kills it.
    pub(crate) dies_with: DiesWith,
}

/// A single-member etcd on loopback; killed when dropped.
#[derive(Debug)]
pub(crate) struct EtcdProcess {
    process: Process,
    name: String,
    address: SocketAddr,
    /// Every flag, ports included: a restart reuses them.
    args: Vec<OsString>,
}

impl EtcdProcess {
    /// Starts etcd on free ports and waits until it serves as this member,
    /// within `budget`. A start whose process exits early (a port taken
    /// between its pick and etcd's bind) or where another etcd answers is
    /// tried again on new ports, with a fresh data directory.
    pub(crate) async fn start(setup: &EtcdSetup, budget: Budget) -> Result<Self, HarnessError> {
        let mut attempt = 1;
        loop {
            let etcd = Self::spawn_on_free_ports(setup)?;
            match etcd.wait_healthy(budget).await {
                Ok(()) => return Ok(etcd),
                Err(error) if attempt < START_ATTEMPTS && etcd.lost_its_ports(&error) => {
                    tracing::debug!(%error, attempt, "etcd did not start, trying new ports");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Spawns etcd on two free ports (held until right before the spawn)
    /// with an empty data directory.
    fn spawn_on_free_ports(setup: &EtcdSetup) -> Result<Self, HarnessError> {
        let (client_port, address) = free_port()?;
        let (peer_port, peer) = free_port()?;
        let data_dir = data_dir(&setup.dir);
        fresh_data_dir(&data_dir)?;
        let log = setup.dir.join("etcd.log");
        let etcd = Self {
            process: Process::new("etcd", setup.binary.clone(), log, setup.dies_with),
            name: setup.name.clone(),
            address,
            args: args(setup, &data_dir, address, peer),
        };
        drop((client_port, peer_port));
        etcd.process.spawn(&etcd.args)?;
        Ok(etcd)
    }

    /// Kills etcd if it runs, starts it again on the same ports and data,
    /// and waits until it serves, within `budget`.
    #[cfg(feature = "etcd")]
    pub(crate) async fn restart(&self, budget: Budget) -> Result<(), HarnessError> {
        self.process.spawn(&self.args)?;
        self.wait_healthy(budget).await
    }

    /// Whether a failed start is worth trying again on new ports: etcd
    /// exited (its port was taken once released), or another etcd answered.
    fn lost_its_ports(&self, error: &HarnessError) -> bool {
        match error {
            HarnessError::NotOurs { .. } => true,
            HarnessError::Unhealthy { .. } => !self.process.is_running(),
            _ => false,
        }
    }

    /// Probes until etcd serves as this member, the process exits, or the
    /// budget is spent.
    async fn wait_healthy(&self, budget: Budget) -> Result<(), HarnessError> {
        while !budget.is_spent() && self.process.is_running() {
            match self.probe().await {
                Ok(true) if self.process.is_running() => return Ok(()),
                Ok(false) => {
                    return Err(HarnessError::NotOurs {
                        address: self.address,
                        expected: self.name.clone(),
                    });
                }
                _ => {}
            }
            tokio::time::sleep(PROBE_PAUSE).await;
        }
        Err(self.process.unhealthy(budget.elapsed()))
    }

    /// Whether etcd is healthy and is this member (`Err` while it is not
    /// serving yet).
    async fn probe(&self) -> Result<bool, HarnessError> {
        gateway::health(self.address).await?;
        let members = gateway::post(
            self.address,
            "member list",
            "/v3/cluster/member/list",
            &json!({}),
        )
        .await?;
        let ours = members["members"]
            .as_array()
            .is_some_and(|members| members.iter().any(|member| member["name"] == *self.name));
        Ok(ours)
    }

    /// The client URL, `http://127.0.0.1:{port}`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The client address.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Whether the process runs.
    #[cfg(feature = "etcd")]
    pub(crate) fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The process's id while it runs.
    #[cfg(feature = "kube")]
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Kills etcd with SIGKILL and reaps it; its data stays.
    pub(crate) fn kill(&self) {
        self.process.kill();
    }

    /// Kills etcd unless another thread holds it (at process exit).
    #[cfg(feature = "kube")]
    pub(crate) fn try_kill(&self) {
        self.process.try_kill();
    }
}

/// The data directory of an etcd whose [`EtcdSetup::dir`] is `dir`.
pub(crate) fn data_dir(dir: &Path) -> PathBuf {
    dir.join("etcd")
}

/// The flags of a single-member cluster on `address` and `peer`, then
/// `setup.extra_args`.
fn args(
    setup: &EtcdSetup,
    data_dir: &Path,
    address: SocketAddr,
    peer: SocketAddr,
) -> Vec<OsString> {
    let (name, url) = (&setup.name, format!("http://{address}"));
    let mut args: Vec<OsString> = [
        format!("--name={name}"),
        format!("--initial-cluster-token={name}-cluster"),
        format!("--data-dir={}", data_dir.display()),
        // `testing::etcd::connect` pings every second; etcd's default
        // minimum (5 s) would answer with GOAWAY `too_many_pings`.
        "--grpc-keepalive-min-time=500ms".to_owned(),
        format!("--listen-client-urls={url}"),
        format!("--advertise-client-urls={url}"),
        format!("--listen-peer-urls=http://{peer}"),
        format!("--initial-advertise-peer-urls=http://{peer}"),
        format!("--initial-cluster={name}=http://{peer}"),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.extend(setup.extra_args.iter().cloned());
    args
}

/// An empty data directory at `path` (mode 0700), replacing what a failed
/// start left there.
fn fresh_data_dir(path: &Path) -> Result<(), HarnessError> {
    let doing = "making etcd's data directory";
    if path.exists() {
        fs::remove_dir_all(path).map_err(HarnessError::io(doing))?;
    }
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path).map_err(HarnessError::io(doing))
}
