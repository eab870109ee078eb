//! `HarnessError`: why a test harness call failed.

#[cfg(any(feature = "etcd", feature = "kube"))]
use std::net::SocketAddr;
use std::time::Duration;

/// Why a test harness call failed: a [`Harness`](super::Harness) that did
/// not settle, or a real server (`etcd::EtcdServer` with the `etcd`
/// feature, `kube::ControlPlane` with `kube`) that could not start or act.
///
/// [`Harness`](super::Harness) returns [`NotSettled`](Self::NotSettled)
/// and [`TaskFailed`](Self::TaskFailed); the server harnesses return the
/// others (those of a feature that is off do not exist), each naming the
/// binary or process it is about.
///
/// # Examples
///
/// A reconcile that never ends keeps its key in flight, so the harness
/// does not settle:
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// # struct Stuck;
/// # impl Reconciler<Light> for Stuck {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Light>) -> Result<Action, Infallible> {
/// #         std::future::pending().await
/// #     }
/// # }
/// use std::time::Duration;
/// use tend::controller::Controller;
/// use tend::memory::MemoryStore;
/// use tend::testing::{Harness, HarnessError};
/// use tend::{Informer, Revision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lights = MemoryStore::new("lights");
/// lights.put(Light { room: "hall".into(), version: Revision::ZERO });
/// let informer = Informer::builder(lights).build()?;
/// let mut harness = Harness::new();
/// harness.informer(&informer);
/// harness.controller(Controller::builder("stuck", &informer, Stuck).build()?);
/// let Err(HarnessError::NotSettled { busy, .. }) = harness.settle(Duration::from_secs(1)).await else {
///     unreachable!()
/// };
/// assert_eq!(busy, "controller `stuck` has 0 ready and 1 in-flight keys");
/// harness.shutdown().await?; // cancels the reconcile after its shutdown grace
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// Work was still going on when the timeout passed.
    #[error("not settled within {timeout:?}: {busy}")]
    NotSettled {
        /// How long the harness waited.
        timeout: Duration,
        /// What was still busy.
        busy: String,
    },
    /// An informer or controller stopped with an error, or panicked.
    #[error("task `{task}` failed: {reason}")]
    TaskFailed {
        /// The informer or controller name.
        task: String,
        /// Its error, or the panic.
        reason: String,
    },
    /// A binary was not found.
    #[cfg(any(feature = "etcd", feature = "kube"))]
    #[error("no `{binary}` binary found (looked at {looked_at}): {hint}")]
    NotInstalled {
        /// Which binary: `etcd` or `kube-apiserver`.
        binary: &'static str,
        /// The environment variable that names it (`TEND_ETCD_BIN`,
        /// `TEND_KUBE_APISERVER_BIN`).
        var: &'static str,
        /// Where it was looked for: the path given, the variable's value,
        /// or the `PATH`.
        looked_at: String,
        /// How to get one.
        hint: &'static str,
    },
    /// A file, a directory, a port or a process could not be made.
    #[cfg(any(feature = "etcd", feature = "kube"))]
    #[error("{doing} failed")]
    Io {
        /// What the harness was doing.
        doing: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process exited, or did not become ready within the startup
    /// timeout.
    #[cfg(any(feature = "etcd", feature = "kube"))]
    #[error("{process} did not become ready within {waited:?}; its log ends with:\n{log}")]
    Unhealthy {
        /// Which process: `etcd` or `kube-apiserver`.
        process: &'static str,
        /// How long was waited.
        waited: Duration,
        /// The end of its output.
        log: String,
    },
    /// Another etcd answered on the address a new etcd was started on (the
    /// new one could not bind it), on every try.
    #[cfg(any(feature = "etcd", feature = "kube"))]
    #[error("another etcd answers on {address} (expected member `{expected}`)")]
    NotOurs {
        /// The client address.
        address: SocketAddr,
        /// The member name of the etcd that was started.
        expected: String,
    },
    /// A request to etcd's JSON gateway failed, or its answer was not the
    /// expected one.
    #[cfg(any(feature = "etcd", feature = "kube"))]
    #[error("etcd's {request} failed: {detail}")]
    EtcdRequest {
        /// The request (`health`, `member list`, `range`, `compaction`).
        request: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// Connecting an etcd client failed.
    #[cfg(feature = "etcd")]
    #[error("connecting to etcd failed")]
    EtcdClient(#[source] etcd_client::Error),
    /// A control plane's certificates could not be generated.
    #[cfg(feature = "kube")]
    #[error("generating the certificates failed")]
    Certificates(#[source] rcgen::Error),
    /// A control plane's kubeconfig could not be loaded into a client
    /// configuration.
    #[cfg(feature = "kube")]
    #[error("loading the kubeconfig failed")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// A request through a kube client failed.
    #[cfg(feature = "kube")]
    #[error("{doing} failed")]
    Kube {
        /// What the harness was doing.
        doing: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

#[cfg(any(feature = "etcd", feature = "kube"))]
impl HarnessError {
    /// An [`Io`](Self::Io) error while `doing` something.
    pub(crate) fn io(doing: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Io { doing, source }
    }
}
