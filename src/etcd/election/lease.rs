//! The candidacy's lease: renewed every retry period from a task, with the
//! leader's key read back; the local deadline.

use std::sync::Arc;

use etcd_client::{Client, GetOptions, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Phase, Term};
use crate::election::ElectionConfig;

/// A candidacy's lease and the key bound to it, for the keeper.
pub(super) struct Lease {
    pub(super) id: i64,
    pub(super) key: Vec<u8>,
}

/// The local deadline of a term: its last renewal plus the renew deadline.
pub(super) fn local_deadline(term: &Term, config: &ElectionConfig) -> Instant {
    crate::time::deadline(term.renewed, config.renew_deadline())
}

/// Renews the lease every retry period until it is gone, a renewal is
/// overdue, the leader's key is gone, or the candidacy ended (lost or
/// idle); publishes each renewal in `term`. A renewal while leading counts
/// only once the leader's key is read back with the token as its create
/// revision.
pub(super) async fn keep_alive(
    client: Client,
    lease: Lease,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
) {
    let mut leases = client.lease_client();
    let mut kv = client.kv_client();
    let mut channel: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut tick = tokio::time::interval(config.retry_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = *term.borrow();
        if matches!(current.phase, Phase::Lost | Phase::Idle) {
            // The candidacy ended (its local deadline passed): stop holding
            // the key, so that another candidate wins at once.
            revoke_quietly(&mut leases, lease.id, &config).await;
            break;
        }
        let deadline = local_deadline(&current, &config);
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        let renewal = async {
            if !renew(&mut leases, &mut channel, lease.id).await? {
                return Ok(false);
            }
            match current.phase {
                Phase::Leading(token) => owns_key(&mut kv, &lease.key, token).await,
                _ => Ok(true),
            }
        };
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(true)) => term.send_modify(|term| term.renewed = sent),
            Ok(Ok(false)) => {
                revoke_quietly(&mut leases, lease.id, &config).await;
                break;
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, lease = lease.id, "renewing the lease failed");
                channel = None;
            }
            Err(_) => break,
        }
    }
    tracing::warn!(
        lease = lease.id,
        "the election lease or key is gone or overdue"
    );
    term.send_modify(|term| {
        term.lease_alive = false;
        if matches!(term.phase, Phase::Leading(_)) {
            term.phase = Phase::Lost;
        }
    });
}

/// Revokes a lease no longer wanted, best effort (it expires anyway).
async fn revoke_quietly(
    leases: &mut etcd_client::LeaseClient,
    lease: i64,
    config: &ElectionConfig,
) {
    let revoke = leases.revoke(lease);
    if let Ok(Err(error)) = tokio::time::timeout(config.renew_deadline(), revoke).await {
        tracing::debug!(%error, lease, "revoking the lease failed");
    }
}

/// Whether `key` exists with `token` as its create revision.
async fn owns_key(
    kv: &mut etcd_client::KvClient,
    key: &[u8],
    token: u64,
) -> Result<bool, etcd_client::Error> {
    let response = kv
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await?;
    let created = response
        .kvs()
        .first()
        .map(etcd_client::KeyValue::create_revision);
    Ok(created.and_then(|revision| u64::try_from(revision).ok()) == Some(token))
}

/// One renewal; `Ok(false)` when etcd says the lease is gone.
async fn renew(
    leases: &mut etcd_client::LeaseClient,
    channel: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    lease: i64,
) -> Result<bool, etcd_client::Error> {
    let Some((keeper, stream)) = channel else {
        // Opening the stream renews once.
        return match leases.keep_alive(lease).await {
            Ok(opened) => {
                *channel = Some(opened);
                Ok(true)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(message))
                if message == "lease not found" =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        };
    };
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(response) => Ok(response.ttl() > 0),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "keep-alive stream ended".to_owned(),
        )),
    }
}
