//! The candidacy: a lease and a key, queued by create revision, until the
//! oldest candidate wins.

use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::lease::Candidate;
use super::{Candidacy, EtcdElection, Phase, Term};
use crate::client::FencingToken;
use crate::election::ElectionError;
use crate::etcd::lease::keep_alive;
use crate::etcd::prefix_end;

/// Why one campaign attempt ended early.
#[derive(Debug, thiserror::Error)]
enum Attempt {
    #[error("etcd request failed")]
    Etcd(#[from] etcd_client::Error),
    #[error("the candidacy's lease expired or could not be renewed in time")]
    LeaseLost,
    #[error("the candidacy's key was deleted")]
    KeyLost,
}

/// Where a candidate stands in the queue, read in one transaction.
enum Turn {
    /// Its key exists and no candidate is older.
    Ours,
    /// The key of the candidate just older, at the store revision read.
    Behind { key: Vec<u8>, at: i64 },
}

/// Withdraws a campaign dropped before it won (without revoking: the lease
/// expires on its own).
struct CampaignGuard<'a> {
    election: &'a EtcdElection,
    armed: bool,
}

impl Drop for CampaignGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            drop(self.election.inner.candidacy.lock().take());
            self.election.inner.term.send_modify(|term| {
                term.phase = Phase::Idle;
                term.lease_alive = false;
            });
        }
    }
}

impl EtcdElection {
    /// Campaigns until elected: retries transient failures every retry
    /// period, fails on a refusal.
    pub(super) async fn campaign_until_elected(&self) -> Result<FencingToken, ElectionError> {
        if let Some(token) = self.token() {
            return Ok(token);
        }
        let mut guard = CampaignGuard {
            election: self,
            armed: true,
        };
        loop {
            match self.attempt().await {
                Ok(token) => {
                    guard.armed = false;
                    tracing::info!(election = %self.inner.name, %token, "elected");
                    return Ok(token);
                }
                Err(Attempt::Etcd(error)) if is_refusal(&error) => {
                    let _ = self.withdraw().await;
                    return Err(self.backend(error));
                }
                Err(error) => {
                    tracing::warn!(
                        election = %self.inner.name,
                        error = %crate::error::error_chain(&error),
                        "campaign failed, retrying"
                    );
                    if let Err(error) = self.withdraw().await {
                        tracing::debug!(%error, "revoking the failed candidacy's lease failed");
                    }
                    tokio::time::sleep(self.inner.config.retry_period()).await;
                }
            }
        }
    }

    /// One campaign: a new lease and key, then wait for our turn.
    async fn attempt(&self) -> Result<FencingToken, Attempt> {
        let inner = &self.inner;
        let sent = Instant::now();
        let granted = self
            .timed(
                inner
                    .client
                    .lease_client()
                    .grant(i64::from(inner.config.lease_seconds()), None),
            )
            .await?;
        let lease = granted.id();
        inner.term.send_replace(Term {
            phase: Phase::Campaigning,
            renewed: sent,
            lease_alive: true,
        });
        let mut key = inner.prefix.clone();
        key.extend(format!("{lease:016x}").into_bytes());
        let keeper = tokio::spawn(keep_alive(
            inner.client.clone(),
            lease,
            inner.config,
            Candidate {
                term: Arc::clone(&inner.term),
                key: key.clone(),
            },
        ));
        *inner.candidacy.lock() = Some(Candidacy {
            key: key.clone(),
            lease,
            _keeper: AbortOnDropHandle::new(keeper),
        });
        let created = self.create_key(&key, lease).await?;
        self.wait_turn(&key, created).await?;
        let token = super::super::fence::token_of(created).unwrap_or(FencingToken::new(0));
        let won = inner.term.send_if_modified(|term| {
            let alive = term.lease_alive && Instant::now() < self.deadline(term);
            if alive {
                term.phase = Phase::Leading(token);
            }
            alive
        });
        if won {
            Ok(token)
        } else {
            Err(Attempt::LeaseLost)
        }
    }

    /// Creates the candidate key bound to `lease`; returns its create
    /// revision.
    async fn create_key(&self, key: &[u8], lease: i64) -> Result<i64, Attempt> {
        let txn = Txn::new()
            .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(
                key,
                self.inner.identity.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(key, None)]);
        let response = self.timed(self.inner.client.kv_client().txn(txn)).await?;
        if response.succeeded() {
            return Ok(response
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision));
        }
        let existing = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(etcd_client::KeyValue::create_revision),
            _ => None,
        });
        existing.ok_or(Attempt::LeaseLost)
    }

    /// Waits until no candidate older than `created` is left, and fails
    /// when this candidate's own key (created at `created`) is gone.
    async fn wait_turn(&self, key: &[u8], created: i64) -> Result<(), Attempt> {
        let mut term = self.inner.term.subscribe();
        loop {
            let Turn::Behind { key: ahead, at } = self.turn(key, created).await? else {
                return Ok(());
            };
            let options = WatchOptions::new().with_start_revision(at + 1);
            let mut watch = self
                .timed(self.inner.client.watch_client().watch(ahead, Some(options)))
                .await?;
            loop {
                tokio::select! {
                    lost = term.wait_for(|t| !t.lease_alive) => {
                        drop(lost);
                        return Err(Attempt::LeaseLost);
                    }
                    message = watch.message() => match message? {
                        None => break,
                        Some(response) if response.canceled() => break,
                        Some(response) => {
                            let deleted = response.events().iter().any(|event| {
                                event.kv().is_some_and(|kv| kv.version() == 0)
                            });
                            if deleted {
                                break;
                            }
                        }
                    },
                }
            }
        }
    }

    /// Reads, in one transaction (one revision), whether this candidate's
    /// key still exists with create revision `created` and whether an older
    /// candidate is left.
    async fn turn(&self, key: &[u8], created: i64) -> Result<Turn, Attempt> {
        let prefix = &self.inner.prefix;
        let older = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_max_create_revision(created - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new()
            .when(vec![
                Compare::create_revision(key, CompareOp::Equal, created),
                Compare::create_revision(prefix.clone(), CompareOp::Greater, created - 1)
                    .with_range(prefix_end(prefix)),
            ])
            .or_else(vec![
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(prefix.clone(), Some(older)),
            ]);
        let response = self.timed(self.inner.client.kv_client().txn(txn)).await?;
        if response.succeeded() {
            return Ok(Turn::Ours);
        }
        let at = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let mut reads = response.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(|kv| (kv.key().to_vec(), kv.create_revision())),
            _ => None,
        });
        let own = reads.next().flatten();
        if own.map(|(_, revision)| revision) != Some(created) {
            return Err(Attempt::KeyLost);
        }
        match reads.next().flatten() {
            Some((key, _)) => Ok(Turn::Behind { key, at }),
            // Refused, yet our key is the oldest: not at one revision,
            // which etcd guarantees; count it as a lost candidacy.
            None => Err(Attempt::KeyLost),
        }
    }

    /// Drops the candidacy and revokes its lease.
    pub(super) async fn withdraw(&self) -> Result<(), etcd_client::Error> {
        let candidacy = self.inner.candidacy.lock().take();
        self.inner.term.send_modify(|term| {
            term.phase = Phase::Idle;
            term.lease_alive = false;
        });
        if let Some(candidacy) = candidacy {
            let lease = candidacy.lease;
            drop(candidacy);
            self.timed(self.inner.client.lease_client().revoke(lease))
                .await?;
        }
        Ok(())
    }
}

/// Whether etcd refused a request for good (retrying will not help).
fn is_refusal(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::InvalidArgument
                | Code::OutOfRange
                | Code::PermissionDenied
                | Code::Unauthenticated
        ),
        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_etcd_refuses_is_final() {
        let refused = etcd_client::Error::GRpcStatus(tonic::Status::out_of_range(
            "etcdserver: too large lease TTL",
        ));
        assert!(is_refusal(&refused));
        let unavailable = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("down"));
        assert!(!is_refusal(&unavailable));
    }
}
