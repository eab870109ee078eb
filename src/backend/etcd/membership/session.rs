//! A membership's session: the member record bound to a lease kept alive
//! by a task, its loss at the local deadline, and leaving.

use std::sync::Arc;

use etcd_client::PutOptions;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::task::AbortOnDropHandle;

use super::{EtcdMembership, Session, Status};
use crate::client::FencingToken;
use crate::etcd::fence::token_of;
use crate::etcd::lease::{Held, Holder, keep_alive, revoke_quietly};
use crate::shard::MembershipError;

/// A session's status and lease, for the lease's keeper, and its member
/// record (key, create revision): read back after each renewal, so that a
/// member whose etcd cannot serve a linearizable read (a frozen disk, a
/// lost quorum) stops renewing and gives its shards up in time.
struct Member {
    status: Arc<watch::Sender<Status>>,
    lease: i64,
    record: (Vec<u8>, FencingToken),
}

impl Member {
    /// Changes the session if it is still this lease's.
    fn change(&self, change: impl FnOnce(&mut Option<Session>) -> bool) -> bool {
        self.status.send_if_modified(|status| {
            let ours = status
                .session
                .as_ref()
                .is_some_and(|s| s.lease == self.lease);
            ours && change(&mut status.session)
        })
    }
}

impl Holder for Member {
    fn held(&self) -> Option<Held> {
        let status = self.status.borrow();
        let session = status.session.as_ref().filter(|s| s.lease == self.lease)?;
        Some(Held {
            renewed: session.renewed,
            key: Some(self.record.clone()),
        })
    }

    fn renewed(&self, sent: Instant) {
        self.change(|session| {
            if let Some(session) = session {
                session.renewed = sent;
            }
            true
        });
    }

    fn expired(&self) {
        self.change(|session| session.take().is_some());
    }
}

/// The create revision of the record a put wrote: the record it replaced
/// kept its own (a member joining again before its old lease expired).
fn created(put: &etcd_client::PutResponse) -> Option<FencingToken> {
    let revision = match put.prev_key() {
        Some(previous) => previous.create_revision(),
        None => put.header()?.revision(),
    };
    token_of(revision)
}

impl EtcdMembership {
    /// Joins: a new lease, the member record bound to it, its keeper.
    pub(super) async fn join_group(&self) -> Result<(), MembershipError> {
        let _one_at_a_time = self.inner.joining.lock().await;
        if self.is_member() {
            return Ok(());
        }
        // A session past its local deadline: free its shards at once.
        if let Some(old) = self.end_session() {
            let mut leases = self.inner.client.lease_client();
            revoke_quietly(&mut leases, old, &self.inner.config).await;
        }
        let inner = &self.inner;
        let sent = Instant::now();
        let seconds = i64::from(inner.config.lease_seconds());
        let granted = self
            .timed(inner.client.lease_client().grant(seconds, None))
            .await
            .map_err(|error| self.backend(error))?;
        let lease = granted.id();
        let mut kv = inner.client.kv_client();
        let put = kv.put(
            self.member_key(),
            inner.id.as_str(),
            Some(PutOptions::new().with_lease(lease).with_prev_key()),
        );
        let record = match self.timed(put).await.map(|put| created(&put)) {
            Ok(Some(token)) => (self.member_key().into_bytes(), token),
            failed => {
                let mut leases = inner.client.lease_client();
                revoke_quietly(&mut leases, lease, &inner.config).await;
                return Err(match failed {
                    Err(error) => self.backend(error),
                    Ok(_) => self.backend("the member record's put had no revision"),
                });
            }
        };
        inner.status.send_replace(Status {
            session: Some(Session {
                lease,
                renewed: sent,
                owned: std::collections::BTreeMap::new(),
            }),
        });
        let keeper = tokio::spawn(keep_alive(
            inner.client.clone(),
            lease,
            inner.config,
            Member {
                status: Arc::clone(&inner.status),
                lease,
                record,
            },
        ));
        *inner.keeper.lock() = Some(AbortOnDropHandle::new(keeper));
        tracing::info!(group = %inner.group, member = %inner.id, lease, "joined");
        Ok(())
    }

    /// Leaves: ends the session and revokes its lease.
    pub(super) async fn leave_group(&self) -> Result<(), MembershipError> {
        let _one_at_a_time = self.inner.joining.lock().await;
        drop(self.inner.keeper.lock().take());
        let Some(lease) = self.end_session() else {
            return Ok(());
        };
        let mut leases = self.inner.client.lease_client();
        let revoke = leases.revoke(lease);
        match self.timed(revoke).await {
            Ok(_) => Ok(()),
            // Expired already: its records are gone.
            Err(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::NotFound =>
            {
                Ok(())
            }
            Err(error) => Err(self.backend(error)),
        }
    }

    /// Ends the session, if any; returns its lease.
    fn end_session(&self) -> Option<i64> {
        let mut lease = None;
        self.inner.status.send_if_modified(|status| {
            lease = status.session.take().map(|s| s.lease);
            lease.is_some()
        });
        lease
    }

    /// Resolves once the session has ended (at once when there is none):
    /// left, the lease gone, or the local deadline passed.
    pub(super) async fn until_lost(&self) {
        let mut status = self.inner.status.subscribe();
        loop {
            let session = status.borrow_and_update().session.clone();
            let Some(session) = session else {
                return;
            };
            tokio::select! {
                () = sleep_until(self.deadline(&session)) => {
                    // A renewal may have moved the deadline as the timer
                    // fired: only an overdue session ends.
                    self.inner.status.send_if_modified(|status| {
                        let overdue = status.session.as_ref().is_some_and(|s| {
                            s.lease == session.lease && Instant::now() >= self.deadline(s)
                        });
                        if overdue {
                            status.session = None;
                        }
                        overdue
                    });
                }
                changed = status.changed() => if changed.is_err() {
                    return;
                },
            }
        }
    }
}
