//! Joining and leaving: the member's Lease, held under a session identity
//! new at each join, renewed as a [`KubeElection`] renews its Lease.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{DeleteParams, Preconditions};
use parking_lot::Mutex;

use super::{KubeMembership, Session};
use crate::election::LeaderElector;
use crate::kube::election::KubeElection;
use crate::kube::endpoint::status_code;
use crate::shard::MembershipError;

impl KubeMembership {
    /// Takes the member Lease under a new session identity (waiting while
    /// an earlier session of this id holds it), unless joined.
    pub(super) async fn join_group(&self) -> Result<(), MembershipError> {
        let _joining = self.inner.joining.lock().await;
        if self.live().is_some() {
            return Ok(());
        }
        let identity = format!("{}/{:016x}", self.inner.id, fastrand::u64(..));
        let election = KubeElection::builder(
            self.inner.client.clone(),
            self.inner.namespace.clone(),
            self.member_lease(self.inner.id.as_str()),
        )
        .identity(identity)
        .config(self.inner.config)
        .labels(self.labels())
        .build()
        .map_err(|error| self.backend(error))?;
        election
            .campaign()
            .await
            .map_err(|error| self.backend(error))?;
        let session = Session {
            election,
            owned: Arc::new(Mutex::new(BTreeMap::new())),
        };
        *self.inner.session.lock() = Some(session);
        self.inner.view.changed();
        Ok(())
    }

    /// Resolves once the current session has ended (at once when there is
    /// none).
    pub(super) async fn until_lost(&self) {
        let Some(session) = self.live() else {
            return;
        };
        session.election.lost().await;
    }

    /// Releases every owned shard, then the member Lease, then deletes it
    /// (over the version it was released at: a new session's is kept;
    /// not when a shard's release failed).
    pub(super) async fn leave_group(&self) -> Result<(), MembershipError> {
        let _joining = self.inner.joining.lock().await;
        let Some(session) = self.inner.session.lock().take() else {
            return Ok(());
        };
        let owned: Vec<_> = session.owned.lock().clone().into_iter().collect();
        let mut failed = None;
        for (index, token) in owned {
            let _taking = self.lock_shard(index).await;
            if let Err(error) = self.release_owned(&session, index, token).await {
                failed.get_or_insert(error);
            }
        }
        session
            .election
            .resign()
            .await
            .map_err(|error| self.backend(error))?;
        // Kept while a shard still names the session: released (naming no
        // session) it frees them at once; gone, only after a lease.
        if failed.is_none() {
            self.delete_member_lease(session.identity()).await?;
        }
        self.inner.view.changed();
        failed.map_or(Ok(()), Err)
    }

    /// Deletes this member's Lease if it names no session (released), over
    /// the version read.
    async fn delete_member_lease(&self, identity: &str) -> Result<(), MembershipError> {
        let name = self.member_lease(self.inner.id.as_str());
        let Some(lease) = self.timed(self.inner.leases.get_opt(&name)).await? else {
            return Ok(());
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.as_deref());
        if holder.is_some_and(|holder| !holder.is_empty() && holder != identity) {
            return Ok(());
        }
        let params = DeleteParams::default().preconditions(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: None,
        });
        match self.timed(self.inner.leases.delete(&name, &params)).await {
            Err(MembershipError::Backend { source, .. })
                if source
                    .downcast_ref::<kube::Error>()
                    .and_then(status_code)
                    .is_some_and(|code| matches!(code, 404 | 409)) =>
            {
                Ok(())
            }
            result => result.map(drop),
        }
    }
}
