//! What a test does to a running plane: kill and restart the API server,
//! compact etcd (through its JSON gateway).

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::json;

use super::{ControlPlane, runtime};
use crate::testing::HarnessError;
use crate::testing::exec::Budget;
use crate::testing::gateway;

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
    /// [`HarnessError::Unhealthy`] if it is not ready within the
    /// [startup timeout](super::ControlPlaneBuilder::startup_timeout) (e.g.
    /// its port was taken meanwhile; the error holds its log's end).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; the API server may be running.
    pub async fn start_apiserver(&self) -> Result<(), HarnessError> {
        let inner = Arc::clone(&self.inner);
        runtime::run(async move {
            let budget = Budget::starting_now(inner.startup);
            inner.apiserver.start_again(budget).await
        })
        .await?
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
    pub async fn restart_apiserver(&self) -> Result<(), HarnessError> {
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
    /// [`HarnessError::EtcdRequest`] if etcd refuses or does not answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave etcd compacted.
    pub async fn compact_etcd(&self) -> Result<u64, HarnessError> {
        let inner = Arc::clone(&self.inner);
        runtime::run(async move {
            let address = inner.etcd.address();
            let revision = revision(address).await?;
            compact(address, revision).await?;
            Ok(revision)
        })
        .await?
    }
}

/// The current revision of the etcd at `address`.
async fn revision(address: SocketAddr) -> Result<u64, HarnessError> {
    // Any key will do: the header carries the store's revision.
    let body = json!({ "key": "dGVuZA==" });
    let answer = gateway::post(address, "range", "/v3/kv/range", &body).await?;
    answer["header"]["revision"]
        .as_str()
        .and_then(|revision| revision.parse().ok())
        .ok_or_else(|| HarnessError::EtcdRequest {
            request: "range",
            detail: format!("no revision in its answer {answer}"),
        })
}

/// Compacts the history of the etcd at `address` up to `revision`,
/// physically (so that it is gone once this returns). A revision compacted
/// already is no error.
async fn compact(address: SocketAddr, revision: u64) -> Result<(), HarnessError> {
    let body = json!({ "revision": revision.to_string(), "physical": true });
    match gateway::post(address, "compaction", "/v3/kv/compaction", &body).await {
        Err(HarnessError::EtcdRequest { detail, .. }) if detail.contains("has been compacted") => {
            Ok(())
        }
        answer => answer.map(drop),
    }
}
