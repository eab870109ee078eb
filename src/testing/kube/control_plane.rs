//! `ControlPlane`: etcd and kube-apiserver for one test (or, shared, for a
//! test binary), and its builder.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use tempfile::TempDir;

use super::apiserver::{ApiServer, Setup};
use super::certs::Certs;
use super::{kubeconfig, runtime};
use crate::testing::HarnessError;
use crate::testing::exec::{Binary, Budget};
use crate::testing::launcher::{ETCD, EtcdProcess, EtcdSetup};
use crate::testing::process::DiesWith;

/// The kube-apiserver binary: `$TEND_KUBE_APISERVER_BIN`, else
/// `kube-apiserver` on the `PATH`.
const APISERVER: Binary = Binary {
    name: "kube-apiserver",
    var: "TEND_KUBE_APISERVER_BIN",
    hint: "point TEND_KUBE_APISERVER_BIN at a kube-apiserver binary: \
        with envtest, `setup-envtest use 1.36 -p path` prints the directory that holds one; \
        or take one from the Kubernetes release binaries \
        (https://dl.k8s.io/release/v1.36.2/bin/linux/amd64/kube-apiserver); \
        in tend's CI it is ../shared/bin/kube-apiserver.gz, unpacked",
};

/// Numbers the control planes of this process, for unique etcd member names.
static PLANES: AtomicU64 = AtomicU64::new(0);

/// A real Kubernetes control plane for tests: etcd and kube-apiserver on
/// free loopback ports, with generated certificates and an admin
/// kubeconfig; both processes are killed when it is dropped.
///
/// See the [module docs](super) for where the binaries come from, how
/// tests share one plane, time, and what becomes of the processes when a
/// test binary dies.
///
/// # Examples
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
/// use tend::testing::kube::ControlPlane;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let plane = ControlPlane::start().await?;
/// let client = plane.client().await?;
/// let namespace = plane.create_namespace(&client, "greeting").await?;
/// let config_maps: Api<ConfigMap> = Api::namespaced(client, &namespace);
/// let mut greeting = ConfigMap::default();
/// greeting.metadata.name = Some("hello".into());
/// config_maps.create(&PostParams::default(), &greeting).await?;
/// plane.restart_apiserver().await?;   // a fresh watch cache; data kept
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ControlPlane {
    pub(super) inner: Arc<Inner>,
}

/// A plane's state, shared with its work on the harness thread. Fields drop
/// in order: the API server before its etcd, the directory last.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) apiserver: ApiServer,
    pub(super) etcd: EtcdProcess,
    kubeconfig_path: PathBuf,
    /// The budget of each start of the API server.
    pub(super) startup: Duration,
    /// Certificates, kubeconfig, logs and etcd's data.
    dir: TempDir,
}

/// Configures a [`ControlPlane`]; from [`ControlPlane::builder`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tend::testing::kube::ControlPlane;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let plane = ControlPlane::builder()
///     .apiserver_arg("--watch-cache=false") // every list and watch served from etcd
///     .startup_timeout(Duration::from_secs(120)) // a slow machine
///     .start()
///     .await?;
/// let client = plane.client().await?;
/// # drop(client); Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct ControlPlaneBuilder {
    apiserver_args: Vec<OsString>,
    apiserver_binary: Option<PathBuf>,
    etcd_binary: Option<PathBuf>,
    startup: Option<Duration>,
}

impl ControlPlaneBuilder {
    /// Passes an extra flag to kube-apiserver, after the harness's own (so
    /// it overrides them), e.g. `--watch-cache=false` or
    /// `--feature-gates=...`.
    pub fn apiserver_arg(mut self, arg: impl Into<OsString>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// The kube-apiserver binary to run, instead of
    /// `$TEND_KUBE_APISERVER_BIN` or `kube-apiserver` on the `PATH`.
    pub fn apiserver_binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.apiserver_binary = Some(path.into());
        self
    }

    /// The etcd binary to run, instead of `$TEND_ETCD_BIN` or `etcd` on
    /// the `PATH`.
    pub fn etcd_binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.etcd_binary = Some(path.into());
        self
    }

    /// How long, in real time, starting may take in all (default 60 s);
    /// also the budget of each [`ControlPlane::start_apiserver`].
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup = Some(timeout);
        self
    }

    /// Starts etcd, then kube-apiserver, and waits until the API server's
    /// `/readyz` answers 200.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotInstalled`] (saying how to get the binary),
    /// [`HarnessError::Unhealthy`] with the end of the process's log,
    /// or another [`HarnessError`] for files and certificates.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the start and kills what it started.
    pub async fn start(self) -> Result<ControlPlane, HarnessError> {
        let apiserver = APISERVER.find(self.apiserver_binary)?;
        let etcd = ETCD.find(self.etcd_binary)?;
        let startup = self.startup.unwrap_or(Duration::from_secs(60));
        let args = self.apiserver_args;
        let inner =
            runtime::run(async move { Inner::start(&apiserver, etcd, &args, startup).await })
                .await??;
        Ok(ControlPlane {
            inner: Arc::new(inner),
        })
    }
}

impl Inner {
    /// Runs on the harness thread.
    async fn start(
        apiserver: &Path,
        etcd: PathBuf,
        extra_args: &[OsString],
        startup: Duration,
    ) -> Result<Self, HarnessError> {
        let budget = Budget::starting_now(startup);
        let number = PLANES.fetch_add(1, Ordering::Relaxed);
        let name = format!("tend-kube-{}-{number}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .map_err(HarnessError::io("making a temporary directory"))?;
        let certs = Certs::generate(dir.path())?;
        let etcd_setup = EtcdSetup {
            binary: etcd,
            dir: dir.path().to_owned(),
            name,
            extra_args: Vec::new(),
            dies_with: DiesWith::HarnessThread,
        };
        let etcd = EtcdProcess::start(&etcd_setup, budget).await?;
        let setup = Setup {
            binary: apiserver,
            dir: dir.path(),
            certs: &certs,
            etcd_url: etcd.url(),
            extra_args,
        };
        let apiserver = ApiServer::start(&setup, budget).await?;
        let kubeconfig_path = dir.path().join("kubeconfig");
        kubeconfig::write(apiserver.kubeconfig(), &kubeconfig_path)?;
        Ok(Self {
            apiserver,
            etcd,
            kubeconfig_path,
            startup,
            dir,
        })
    }

    /// Kills both processes (the API server first).
    fn kill(&self) {
        self.apiserver.kill();
        self.etcd.kill();
    }

    /// Kills both processes unless another thread holds them (at exit).
    pub(super) fn try_kill(&self) {
        self.apiserver.try_kill();
        self.etcd.try_kill();
    }
}

impl ControlPlane {
    /// Starts a control plane with the default settings.
    ///
    /// # Errors
    ///
    /// As [`ControlPlaneBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the start and kills what it started.
    pub async fn start() -> Result<Self, HarnessError> {
        Self::builder().start().await
    }

    /// Starts configuring a control plane.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// The API server's URL, `https://127.0.0.1:{port}` (kept across
    /// restarts).
    #[must_use]
    pub fn url(&self) -> String {
        self.inner.apiserver.url()
    }

    /// etcd's client URL, `http://127.0.0.1:{port}`.
    #[must_use]
    pub fn etcd_url(&self) -> String {
        self.inner.etcd.url()
    }

    /// The admin kubeconfig file (JSON, which kubectl reads as YAML):
    /// `KUBECONFIG=... kubectl get ns` while a test is paused.
    #[must_use]
    pub fn kubeconfig_path(&self) -> &Path {
        &self.inner.kubeconfig_path
    }

    /// The admin kubeconfig: one cluster, one user in `system:masters` (a
    /// client certificate), one context, with absolute paths to the
    /// certificate files.
    #[must_use]
    pub fn kubeconfig(&self) -> Kubeconfig {
        self.inner.apiserver.kubeconfig().clone()
    }

    /// The plane's directory, removed on drop: certificates, the
    /// kubeconfig, the logs (`etcd.log`, `kube-apiserver.log`, appended to
    /// across restarts) and etcd's data.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.inner.dir.path()
    }

    /// The API server's process id, while it runs.
    #[must_use]
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.inner.apiserver.pid()
    }

    /// etcd's process id, while it runs.
    #[must_use]
    pub fn etcd_pid(&self) -> Option<u32> {
        self.inner.etcd.pid()
    }

    /// A new admin client, made with kube's own kubeconfig loader, for the
    /// current tokio runtime. A kube client's connections belong to the
    /// runtime it was made on, and each `#[tokio::test]` has its own: ask
    /// for a client in each test rather than keeping one.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kubeconfig`] if the certificates cannot be read
    /// (the plane's directory was removed), [`HarnessError::Kube`] if
    /// the client cannot be built.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn client(&self) -> Result<kube::Client, HarnessError> {
        kubeconfig::client(self.kubeconfig()).await
    }

    /// Creates a namespace named `{prefix}-` and a suffix the API server
    /// picks (`generateName`), and returns its name: tests that share a
    /// plane each work in a fresh namespace. Namespaces are not deleted:
    /// with no controller-manager, a deleted namespace stays `Terminating`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kube`] if the API server refuses, e.g. when
    /// `prefix` has characters a namespace name cannot have (it is a DNS
    /// label: lowercase letters, digits and `-`, starting with a letter or
    /// digit; the server shortens a long prefix).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, but a namespace may have been created.
    pub async fn create_namespace(
        &self,
        client: &kube::Client,
        prefix: &str,
    ) -> Result<String, HarnessError> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let failed = |source| HarnessError::Kube {
            doing: "creating a namespace",
            source,
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(failed)?;
        created.metadata.name.ok_or_else(|| {
            let status = kube::core::Status::failure("the API server named no namespace", "");
            failed(kube::Error::Api(Box::new(status)))
        })
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Now, even if work on the harness thread still holds `inner`.
        self.inner.kill();
    }
}
