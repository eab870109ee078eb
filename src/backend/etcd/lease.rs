//! A lease kept alive from a task, and the local deadline its holder acts
//! by: shared by the election's candidacy and the shard membership.
//!
//! The holder gives up on its own at its *local deadline*: the send time of
//! its last successful renewal plus the renew deadline, on the monotonic
//! clock. Since the lease outlives the renew deadline, a holder cut off
//! from etcd stops acting before its lease can expire for the others.

use etcd_client::{Client, GetOptions, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::client::FencingToken;
use crate::election::ElectionConfig;

/// What a holder holds now, read by the keeper before each renewal.
pub(super) struct Held {
    /// When the request of the last successful renewal was sent.
    pub(super) renewed: Instant,
    /// A key that must still exist with this create revision (the leader's
    /// key, a member's record), read back after each renewal: a renewal
    /// counts only once etcd also served that linearizable read.
    pub(super) key: Option<(Vec<u8>, FencingToken)>,
}

/// The state a lease is kept alive for, shared with the keeper.
pub(super) trait Holder: Send + Sync + 'static {
    /// What is held now; `None` once the holder gave the lease up (lost or
    /// ended), so the keeper revokes it.
    fn held(&self) -> Option<Held>;

    /// A renewal whose request was sent at `sent` succeeded.
    fn renewed(&self, sent: Instant);

    /// The lease is gone, its key is gone, or a renewal is overdue.
    fn expired(&self);
}

/// The local deadline: the last renewal plus the renew deadline.
pub(super) fn local_deadline(renewed: Instant, config: &ElectionConfig) -> Instant {
    crate::time::deadline(renewed, config.renew_deadline())
}

/// Renews `lease` every retry period until it is gone, the local deadline
/// passes, the holder's key is gone, or the holder gave it up; reports
/// each renewal to `holder`. An attempt unanswered within half the time
/// left (at least a retry period) is abandoned and tried again at once. A renewal counts only once the holder's key,
/// if any, is read back with its create revision.
pub(super) async fn keep_alive(
    client: Client,
    lease: i64,
    config: ElectionConfig,
    holder: impl Holder,
) {
    let mut leases = client.lease_client();
    let mut kv = client.kv_client();
    let mut channel: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut tick = tokio::time::interval(config.retry_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(held) = holder.held() else {
            // The holder ended (its local deadline passed): stop holding the
            // keys, so that others take over at once.
            revoke_quietly(&mut leases, lease, &config).await;
            break;
        };
        let deadline = local_deadline(held.renewed, &config);
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        let renewal = async {
            if !renew(&mut leases, &mut channel, lease).await? {
                return Ok(false);
            }
            match &held.key {
                Some((key, created)) => owns_key(&mut kv, key, *created).await,
                None => Ok(true),
            }
        };
        // One attempt may stall (a follower forwarding it to a leader that
        // was just cut off): it is given up after half the time left (at
        // least a retry period), and tried again on a new stream, while the
        // deadline allows. A slow but live etcd still answers within it.
        let bound = config.retry_period().max((deadline - sent) / 2);
        let attempt = crate::time::deadline(sent, bound).min(deadline);
        match tokio::time::timeout_at(attempt, renewal).await {
            Ok(Ok(true)) => holder.renewed(sent),
            Ok(Ok(false)) => {
                revoke_quietly(&mut leases, lease, &config).await;
                break;
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, lease, "renewing the lease failed");
                channel = None;
            }
            Err(_) => {
                tracing::debug!(lease, "a renewal got no answer in time; trying again");
                channel = None;
            }
        }
    }
    tracing::warn!(lease, "the lease or its key is gone or overdue");
    holder.expired();
}

/// Revokes a lease no longer wanted, best effort (it expires anyway).
pub(super) async fn revoke_quietly(
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
    token: FencingToken,
) -> Result<bool, etcd_client::Error> {
    let response = kv
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await?;
    let created = response
        .kvs()
        .first()
        .map(etcd_client::KeyValue::create_revision);
    Ok(created.and_then(super::fence::token_of) == Some(token))
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
