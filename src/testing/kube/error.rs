//! `KubeHarnessError`: why a control plane could not start or serve.

use std::time::Duration;

/// Why a [`ControlPlane`](super::ControlPlane) call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeHarnessError {
    /// A binary was not found.
    #[error("no `{what}` binary found (looked at {looked_at}): {hint}")]
    NotInstalled {
        /// Which binary: `etcd` or `kube-apiserver`.
        what: &'static str,
        /// Where it was looked for.
        looked_at: String,
        /// How to get one.
        hint: &'static str,
    },
    /// A file, a directory or a process could not be made.
    #[error("{doing} failed")]
    Io {
        /// What the harness was doing.
        doing: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The certificates could not be generated.
    #[error("generating the certificates failed")]
    Certificates(#[source] rcgen::Error),
    /// A process exited, or did not become ready within the startup timeout.
    #[error("{what} did not become ready within {waited:?}; its log ends with:\n{log}")]
    Unhealthy {
        /// Which process: `etcd` or `kube-apiserver`.
        what: &'static str,
        /// How long was waited.
        waited: Duration,
        /// The end of its output.
        log: String,
    },
    /// etcd refused a request, or answered something unexpected.
    #[error("etcd's {request} failed: {detail}")]
    Etcd {
        /// The request (`range`, `compaction`).
        request: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// The kubeconfig could not be loaded into a client configuration.
    #[error("loading the kubeconfig failed")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// A request through the kube client failed.
    #[error("{doing} failed")]
    Kube {
        /// What the harness was doing.
        doing: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

impl KubeHarnessError {
    /// An [`Io`](Self::Io) error while `doing` something.
    pub(super) fn io(doing: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Io { doing, source }
    }
}
