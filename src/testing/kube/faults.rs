//! What a test does to a running plane: kill and restart the API server,
//! compact etcd.

use std::sync::Arc;

use super::{ControlPlane, KubeHarnessError, runtime};

impl ControlPlane {
    /// Kills the API server with SIGKILL (as a crash) and waits for it to
    /// exit; etcd and its data stay. Clients then fail to connect until
    /// [`start_apiserver`](Self::start_apiserver).
    pub fn kill_apiserver(&self) {
        self.inner.apiserver.kill();
    }

    /// Starts the API server again after
    /// [`kill_apiserver`](Self::kill_apiserver), on the same port with the
    /// same flags, and
    /// waits until `/readyz` answers 200; if it runs, only waits for that.
    /// Its watch cache starts afresh at etcd's current revision (see the
    /// [module docs](super) on `410 Gone`).
    ///
    /// # Errors
    ///
    /// [`KubeHarnessError::Unhealthy`] if it is not ready within the
    /// [startup timeout](super::ControlPlaneBuilder::startup_timeout) (e.g.
    /// its port was taken meanwhile; the error holds its log's end).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; the API server may be running.
    pub async fn start_apiserver(&self) -> Result<(), KubeHarnessError> {
        let inner = Arc::clone(&self.inner);
        runtime::run(async move { inner.apiserver.start_again(inner.startup).await }).await?
    }

    /// Kills the API server and starts it again: for "the API server
    /// restarts, watches resume" tests. Clients made before keep working
    /// (they reconnect); their open watches end.
    ///
    /// # Errors
    ///
    /// As [`start_apiserver`](Self::start_apiserver).
    ///
    /// # Cancel safety
    ///
    /// As [`start_apiserver`](Self::start_apiserver).
    pub async fn restart_apiserver(&self) -> Result<(), KubeHarnessError> {
        self.kill_apiserver();
        self.start_apiserver().await
    }

    /// Compacts etcd's history at its current revision (physically) and
    /// returns that revision. A watch from an older resource version that
    /// reaches etcd then ends with `410 Gone` (reason `Expired`); one
    /// served from the API server's watch cache may not: see the
    /// [module docs](super).
    ///
    /// # Errors
    ///
    /// [`KubeHarnessError::Etcd`] if etcd refuses or does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave etcd compacted.
    pub async fn compact_etcd(&self) -> Result<u64, KubeHarnessError> {
        let inner = Arc::clone(&self.inner);
        runtime::run(async move {
            let revision = inner.etcd.revision().await?;
            inner.etcd.compact(revision).await?;
            Ok(revision)
        })
        .await?
    }
}
