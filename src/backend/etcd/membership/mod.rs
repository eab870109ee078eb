//! `EtcdMembership`: a member of a sharded group held in etcd.
//!
//! `session.rs` joins and leaves (the member record and its lease, kept
//! alive by `etcd/lease.rs`) and tells when the membership is lost;
//! `members.rs` follows the live set; `ownership.rs` acquires and releases
//! shards and fences writes with their tokens.

mod members;
mod ownership;
mod session;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::Client;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::client::FencingToken;
use crate::election::ElectionConfig;
use crate::error::BoxError;
use crate::shard::unclaimed::{Stripes, Unclaimed};
use crate::shard::{MemberId, Membership, MembershipError, Shard, ShardCount};

/// This member's state, published to `lost`, `acquire` and the keeper.
#[derive(Debug, Clone, Default)]
struct Status {
    /// While joined and the lease not known gone (the local deadline is
    /// checked on every read).
    session: Option<Session>,
}

/// One membership: from a join to its leave or loss.
#[derive(Debug, Clone)]
struct Session {
    lease: i64,
    /// When the request of the last successful lease renewal was sent.
    renewed: Instant,
    /// The shards owned, by index, with their tokens.
    owned: BTreeMap<u32, FencingToken>,
}

/// A member of a group of replicas sharing the shards of a key space,
/// held in etcd; implements [`Membership`] and, over its shards' tokens,
/// [`Fencing`](crate::client::Fencing). Clones share one member.
///
/// # How it works
///
/// [`join`](Membership::join) grants a lease (TTL:
/// [`ElectionConfig::lease`]), writes the member record
/// `{prefix}/members/{id}` bound to it, and keeps the lease alive every
/// [`retry_period`](ElectionConfig::retry_period) from a task, as
/// [`EtcdElection`](super::EtcdElection) does. The member gives its
/// membership up at its *local deadline* — the send time of its last
/// successful renewal plus the
/// [`renew_deadline`](ElectionConfig::renew_deadline), on the monotonic
/// clock — strictly before its lease can expire for the others; at once
/// when etcd reports the lease gone. A renewal counts only once the member
/// record is also read back (a linearizable read): a member whose etcd
/// cannot serve reads (a frozen disk still forwards keep-alives) gives its
/// shards up rather than holding keys it cannot reconcile.
///
/// [`members`](Membership::members) lists `{prefix}/members/` and watches
/// it from the list's revision (listing again after a compaction or a
/// failure).
///
/// [`acquire`](Membership::acquire) creates the ownership record
/// `{prefix}/shards/{index}`, bound to the member's lease, in a transaction
/// that requires it absent (`create_revision == 0`), and otherwise watches
/// it until it is deleted (released, or its owner's lease expired). The
/// shard's **fencing token** is the record's create revision: etcd
/// revisions are global, so each acquisition's token is greater than every
/// token before it, of any shard of the group (of any key of the cluster),
/// and a deleted record is never created again with the same revision. A
/// token is current while its record exists with that create revision;
/// locally, while this member owns the shard before its local deadline.
/// [`release`](Membership::release) deletes the record if its create
/// revision is still the token. Through
/// [`EtcdSource::client_fenced_by`](super::EtcdSource::client_fenced_by),
/// a fenced write's transaction compares that create revision, so etcd
/// itself refuses the write of a member that lost the shard.
///
/// [`leave`](Membership::leave) revokes the lease, deleting the member
/// record and every ownership record at once. Dropping the last handle
/// stops the renewals without revoking: the records linger until the lease
/// expires, as after a crash.
///
/// Ids must be unique among live members: a member joining with the id of
/// a live one takes its record over (its ownership records stay its own,
/// bound to its lease).
///
/// # Examples
///
/// ```no_run
/// use tend::etcd::EtcdMembership;
/// use tend::shard::{Membership, ShardCount};
///
/// # async fn run(client: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(16)?;
/// let member = EtcdMembership::builder(client, "workers", "replica-1", shards).build()?;
/// member.join().await?;
/// let shard = shards.shard(3).expect("below the count");
/// let token = member.acquire(shard).await?;
/// // ... reconcile the shard's keys, writes fenced with `token` ...
/// member.release(shard, token).await?;
/// member.leave().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdMembership {
    inner: Arc<Inner>,
}

struct Inner {
    group: String,
    id: MemberId,
    /// `{prefix}/`: the members' and shards' keys live under it.
    root: String,
    shards: ShardCount,
    client: Client,
    config: ElectionConfig,
    status: Arc<watch::Sender<Status>>,
    /// The current session's lease keeper.
    keeper: Mutex<Option<AbortOnDropHandle<()>>>,
    /// Joins and leaves, one at a time.
    joining: tokio::sync::Mutex<()>,
    /// Shard takes and releases, one at a time per stripe of shards: an
    /// orphan's release must not interleave with a new acquire of the same
    /// shard (which would return the token the release is about to end).
    taking: Stripes,
    /// Tokens won for acquires that have not returned them yet.
    unclaimed: Unclaimed,
    members: Arc<watch::Sender<Vec<MemberId>>>,
    /// The members' watch, started by the first `members` or `join`.
    watcher: Mutex<Option<AbortOnDropHandle<()>>>,
}

/// Why an [`EtcdMembership`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipBuildError {
    /// The group's name is empty or contains `/`: the default prefix of a
    /// group `a` would then also cover the records of a group `a/b`.
    #[error("group name `{group}` is empty or contains `/`")]
    InvalidGroup {
        /// The name given.
        group: String,
    },
    /// The member's id is empty or contains `/` (its record's key would
    /// not be one level under the members' prefix).
    #[error("member id `{member}` is empty or contains `/`")]
    InvalidMember {
        /// The id given.
        member: String,
    },
    /// The prefix is empty or ends with `/` (the records are
    /// `{prefix}/members/…` and `{prefix}/shards/…`).
    #[error("membership prefix `{prefix}` is empty or ends with `/`")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
    },
}

/// Configures an [`EtcdMembership`]; from [`EtcdMembership::builder`].
///
/// # Examples
///
/// Run here against a real etcd started by
/// [`EtcdServer`](crate::testing::etcd::EtcdServer):
///
/// ```
/// use tend::election::ElectionConfig;
/// use tend::etcd::{EtcdMembership, MembershipBuildError};
/// use tend::shard::{Membership, ShardCount};
///
/// # async fn run(etcd: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(64)?; // the same on every member
/// let member = EtcdMembership::builder(etcd.clone(), "workers", "replica-1", shards)
///     .prefix("/shop/workers") // records under `/shop/workers/members/` and `/shop/workers/shards/`
///     .config(ElectionConfig::default())
///     .build()?;
/// assert_eq!(member.shard_count(), shards);
/// member.join().await?; // a record under the member's lease
/// assert!(member.is_member());
/// member.leave().await?;
///
/// let refused = EtcdMembership::builder(etcd, "workers", "a/b", shards).build();
/// assert!(matches!(refused, Err(MembershipBuildError::InvalidMember { .. })));
/// # Ok(()) }
/// # #[tokio::main] async fn main() {
/// #     let server = tend::testing::etcd::EtcdServer::start().await.unwrap();
/// #     run(server.client().await.unwrap()).await.unwrap();
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct EtcdMembershipBuilder {
    client: Client,
    group: String,
    id: String,
    shards: ShardCount,
    prefix: Option<String>,
    config: ElectionConfig,
}

impl fmt::Debug for EtcdMembershipBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdMembershipBuilder")
            .field("group", &self.group)
            .field("id", &self.id)
            .field("shards", &self.shards)
            .field("prefix", &self.prefix)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdMembershipBuilder {
    /// The key prefix the group's records live under (default:
    /// `tend/groups/{group}`); the records are `{prefix}/members/{id}` and
    /// `{prefix}/shards/{index}`. Nothing else may be stored under it.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The lease's timing (default: [`ElectionConfig::default`]): the
    /// lease's TTL, the renew deadline (the local deadline's distance from
    /// the last renewal) and the retry period (how often it is renewed).
    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }

    /// The member, not joined yet.
    ///
    /// # Errors
    ///
    /// [`MembershipBuildError`] when the group's name or the member's id
    /// is empty or contains `/`, or the prefix is empty or ends with `/`.
    pub fn build(self) -> Result<EtcdMembership, MembershipBuildError> {
        if self.group.is_empty() || self.group.contains('/') {
            return Err(MembershipBuildError::InvalidGroup { group: self.group });
        }
        if self.id.is_empty() || self.id.contains('/') {
            return Err(MembershipBuildError::InvalidMember { member: self.id });
        }
        let prefix = self
            .prefix
            .unwrap_or_else(|| format!("tend/groups/{}", self.group));
        if prefix.is_empty() || prefix.ends_with('/') {
            return Err(MembershipBuildError::InvalidPrefix { prefix });
        }
        Ok(EtcdMembership {
            inner: Arc::new(Inner {
                group: self.group,
                id: MemberId::from(self.id),
                root: format!("{prefix}/"),
                shards: self.shards,
                client: self.client,
                config: self.config,
                status: Arc::new(watch::Sender::new(Status::default())),
                keeper: Mutex::new(None),
                joining: tokio::sync::Mutex::new(()),
                taking: Stripes::new(),
                unclaimed: Unclaimed::new(),
                members: Arc::new(watch::Sender::new(Vec::new())),
                watcher: Mutex::new(None),
            }),
        })
    }
}

impl fmt::Debug for EtcdMembership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdMembership")
            .field("group", &self.inner.group)
            .field("id", &self.inner.id)
            .field("member", &self.is_member())
            .finish_non_exhaustive()
    }
}

impl EtcdMembership {
    /// Starts configuring the member `id` of the group `group`, whose key
    /// space is split in `shards` shards (the same on every member).
    pub fn builder(
        client: Client,
        group: impl Into<String>,
        id: impl Into<String>,
        shards: ShardCount,
    ) -> EtcdMembershipBuilder {
        EtcdMembershipBuilder {
            client,
            group: group.into(),
            id: id.into(),
            shards,
            prefix: None,
            config: ElectionConfig::default(),
        }
    }

    /// The timing in use.
    #[must_use]
    pub fn config(&self) -> ElectionConfig {
        self.inner.config
    }

    /// The group's shard count.
    #[must_use]
    pub fn shard_count(&self) -> ShardCount {
        self.inner.shards
    }

    /// Whether this member is joined now (and its local deadline has not
    /// passed).
    #[must_use]
    pub fn is_member(&self) -> bool {
        self.live().is_some()
    }

    /// The shards this member owns now, with their tokens, in order (none
    /// once its local deadline passed).
    #[must_use]
    pub fn owned(&self) -> Vec<(Shard, FencingToken)> {
        let Some(session) = self.live() else {
            return Vec::new();
        };
        session
            .owned
            .iter()
            .filter_map(|(&index, &token)| Some((self.inner.shards.shard(index)?, token)))
            .collect()
    }

    /// The current session, unless its local deadline passed.
    fn live(&self) -> Option<Session> {
        let status = self.inner.status.borrow();
        let session = status.session.as_ref()?;
        (Instant::now() < self.deadline(session)).then(|| session.clone())
    }

    fn deadline(&self, session: &Session) -> Instant {
        super::lease::local_deadline(session.renewed, &self.inner.config)
    }

    fn member_key(&self) -> String {
        format!("{}members/{}", self.inner.root, self.inner.id)
    }

    fn shard_key(&self, index: u32) -> String {
        format!("{}shards/{index}", self.inner.root)
    }

    fn backend(&self, error: impl Into<BoxError>) -> MembershipError {
        MembershipError::Backend {
            group: self.inner.group.clone(),
            source: error.into(),
        }
    }

    fn not_joined(&self) -> MembershipError {
        MembershipError::NotJoined {
            group: self.inner.group.clone(),
            member: self.inner.id.clone(),
        }
    }

    /// A request bounded by the renew deadline.
    async fn timed<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        tokio::time::timeout(self.inner.config.renew_deadline(), request)
            .await
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "etcd request timed out",
                )))
            })
    }
}

#[async_trait]
impl Membership for EtcdMembership {
    fn group(&self) -> &str {
        &self.inner.group
    }

    fn id(&self) -> &MemberId {
        &self.inner.id
    }

    async fn join(&self) -> Result<(), MembershipError> {
        self.start_watcher();
        self.join_group().await
    }

    fn members(&self) -> watch::Receiver<Vec<MemberId>> {
        self.start_watcher();
        self.inner.members.subscribe()
    }

    async fn acquire(&self, shard: Shard) -> Result<FencingToken, MembershipError> {
        self.acquire_shard(shard).await
    }

    async fn release(&self, shard: Shard, token: FencingToken) -> Result<(), MembershipError> {
        self.release_shard(shard, token).await
    }

    async fn lost(&self) {
        self.until_lost().await;
    }

    async fn leave(&self) -> Result<(), MembershipError> {
        self.leave_group().await
    }
}

/// A local check of a shard token: current while this member owns a
/// shard with it, before its local deadline (etcd itself checks it again in
/// a fenced write's transaction).
impl crate::client::Fencing for EtcdMembership {
    fn is_current(&self, token: FencingToken) -> bool {
        self.live()
            .is_some_and(|session| session.owned.values().any(|&t| t == token))
    }
}
