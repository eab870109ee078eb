//! The control plane's kube-apiserver: its flags (those envtest uses), a
//! start on a free port, and the wait for `/readyz`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kube::config::Kubeconfig;

use super::certs::Certs;
use super::kubeconfig;
use crate::testing::HarnessError;
use crate::testing::exec::{Budget, free_port};
use crate::testing::process::{DiesWith, Process};

/// How many times a first start is tried on a new port when the API server
/// exits early (its port was taken in the meantime).
const START_ATTEMPTS: u32 = 5;

/// How long one `/readyz` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A kube-apiserver on loopback, serving as long as its etcd does.
#[derive(Debug)]
pub(super) struct ApiServer {
    process: Process,
    address: SocketAddr,
    args: Vec<OsString>,
    kubeconfig: Kubeconfig,
}

/// What an API server is started with.
#[derive(Debug)]
pub(super) struct Setup<'a> {
    pub(super) binary: &'a Path,
    /// Holds the log.
    pub(super) dir: &'a Path,
    pub(super) certs: &'a Certs,
    pub(super) etcd_url: String,
    /// Passed after the harness's own flags, so they override them.
    pub(super) extra_args: &'a [OsString],
}

impl ApiServer {
    /// Starts the API server on a free port and waits until it is ready,
    /// within `budget`.
    pub(super) async fn start(setup: &Setup<'_>, budget: Budget) -> Result<Self, HarnessError> {
        let mut attempt = 1;
        loop {
            let (port, address) = free_port()?;
            let server = Self {
                process: Process::new(
                    "kube-apiserver",
                    setup.binary.to_owned(),
                    setup.dir.join("kube-apiserver.log"),
                    DiesWith::HarnessThread,
                ),
                address,
                args: args(setup, address),
                kubeconfig: kubeconfig::admin(&format!("https://{address}"), setup.certs),
            };
            drop(port);
            match server.launch(budget).await {
                Ok(()) => return Ok(server),
                Err(error @ HarnessError::Unhealthy { .. })
                    if attempt < START_ATTEMPTS && !server.process.is_running() =>
                {
                    tracing::debug!(%error, attempt, "kube-apiserver exited, trying a new port");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Starts the API server again on the same port unless it runs, and
    /// waits until it is ready, within `budget`.
    pub(super) async fn start_again(&self, budget: Budget) -> Result<(), HarnessError> {
        if !self.process.is_running() {
            self.process.spawn(&self.args)?;
        }
        self.wait_ready(budget).await
    }

    /// Spawns the process and waits until it is ready.
    async fn launch(&self, budget: Budget) -> Result<(), HarnessError> {
        self.process.spawn(&self.args)?;
        self.wait_ready(budget).await
    }

    /// Waits until `/readyz` answers 200, the process exits, or the budget
    /// is spent (real time: see [`runtime`](super::runtime)).
    async fn wait_ready(&self, budget: Budget) -> Result<(), HarnessError> {
        let client = kubeconfig::client(self.kubeconfig.clone()).await?;
        while !budget.is_spent() && self.process.is_running() {
            let probe = client.request_text(readyz());
            if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(self.process.unhealthy(budget.elapsed()))
    }

    /// `https://127.0.0.1:{port}`.
    pub(super) fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// The admin kubeconfig.
    pub(super) fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// The process's id while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Kills the API server (SIGKILL).
    pub(super) fn kill(&self) {
        self.process.kill();
    }

    /// Kills the API server unless another thread holds it (at process exit).
    pub(super) fn try_kill(&self) {
        self.process.try_kill();
    }
}

/// `GET /readyz`.
fn readyz() -> http::Request<Vec<u8>> {
    let mut request = http::Request::new(Vec::new());
    *request.uri_mut() = http::Uri::from_static("/readyz");
    request
}

/// The flags of a test API server (as envtest's), then `setup.extra_args`.
fn args(setup: &Setup<'_>, address: SocketAddr) -> Vec<OsString> {
    let certs = setup.certs;
    let file = |flag: &str, path: &Path| format!("--{flag}={}", path.display());
    let mut args: Vec<OsString> = [
        "--advertise-address=127.0.0.1".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={}", address.port()),
        format!("--etcd-servers={}", setup.etcd_url),
        file("cert-dir", setup.dir),
        file("tls-cert-file", &certs.serving_cert),
        file("tls-private-key-file", &certs.serving_key),
        file("client-ca-file", &certs.client_ca),
        format!("--service-account-issuer=https://{address}/"),
        file("service-account-key-file", &certs.service_account_pub),
        file(
            "service-account-signing-key-file",
            &certs.service_account_key,
        ),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--allow-privileged=true".to_owned(),
        // No controller-manager makes service-account tokens for pods.
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        "--authorization-mode=RBAC".to_owned(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.extend(setup.extra_args.iter().cloned());
    args
}
