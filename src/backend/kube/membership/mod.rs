//! `KubeMembership`: a member of a sharded group held in
//! `coordination.k8s.io` Leases, on the API server alone.
//!
//! `session.rs` joins and leaves (the member's Lease, held as a
//! [`KubeElection`] holds its own) and tells when the membership is lost;
//! `view.rs` follows the group's Leases (the live set, and wake-ups for
//! waiting acquires); `ownership.rs` acquires and releases shards.

mod ownership;
mod session;
mod view;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::election::KubeElection;
use super::names;
use crate::client::{Fences, Fencing, FencingToken};
use crate::election::ElectionConfig;
use crate::error::BoxError;
use crate::shard::unclaimed::{Stripes, Unclaimed};
use crate::shard::{MemberId, Membership, MembershipError, Shard, ShardCount};

/// The label naming the group on each of its Leases.
const GROUP_LABEL: &str = "tend.dev/membership-group";

/// A member of a group of replicas sharing the shards of a key space,
/// held in `coordination.k8s.io/v1` Leases on the API server (no etcd of
/// its own); implements [`Membership`] and, over its shards' tokens,
/// [`Fences`] (see [`is_current`](Self::is_current)). Clones share one
/// member.
///
/// # How it works
///
/// - **Members.** [`join`](Membership::join) takes the Lease
///   `{group}-member-{id}` as a [`KubeElection`] takes its Lease, under a
///   session identity `{id}/{random}` new at each join, and renews it every
///   [`retry_period`](ElectionConfig::retry_period). The member gives its
///   membership up at its *local deadline* — the send time of its last
///   successful renewal plus the
///   [`renew_deadline`](ElectionConfig::renew_deadline), on its monotonic
///   clock — before its Lease can expire for anyone else. A join waits
///   while an earlier session of the same id still holds the Lease.
/// - **Shards.** Shard `n` is the Lease `{group}-shard-{n}`, naming the
///   session that owns it. [`acquire`](Membership::acquire) writes this
///   member's session into it, conditional on the `resourceVersion` it read,
///   when it names no one, or a session that has ended: one whose member
///   Lease names another session or none (a session ends before its Lease
///   is released or taken), or that this member has seen unrenewed for the
///   Lease's duration on its own clock (as client-go's leader election
///   measures expiry). Otherwise it waits for the group's Leases to change
///   or that duration to pass. The shard's **fencing token** is the
///   `resourceVersion` of that write: an etcd-backed API server's versions
///   are one global revision, so every acquisition's token is greater
///   than every token before it, of any shard.
///   [`release`](Membership::release) clears the holder, conditional on
///   the token being still the Lease's version.
/// - **Fencing is local**, as with [`KubeElection`]: a token is current
///   while this member owns the shard with it, before its local deadline.
///   The API server cannot check a token in the same transaction as a
///   write ([`KubeSource::client_fenced_by`](super::KubeSource::client_fenced_by)
///   checks it just before sending). A write sent before the deadline can
///   still land after another member took the shard, if the network holds
///   it longer than the lease minus the renew deadline.
/// - **Guaranteed**: at most one member owns a shard at a time, provided
///   the members' clocks run at about the same rate (not that they agree)
///   and nothing but the members writes the group's Leases. **Not
///   guaranteed**: that a write fenced by a token cannot land late (see
///   above); a member Lease deleted by hand ends its session only at the
///   session's next renewal, while others may take its shards at once.
///
/// [`members`](Membership::members) lists and watches the group's Leases
/// (label `tend.dev/membership-group`), and counts a member while its
/// Lease names a session renewed within the Lease's duration.
///
/// [`leave`](Membership::leave) releases every owned shard, then the
/// member Lease, then deletes it. Dropping the last handle stops the
/// renewals without releasing: others take the shards once the Lease
/// expired for them, as after a crash (a client from
/// `client_fenced_by(&membership)` holds no handle: its tokens are stale
/// from then on).
///
/// Needs `get`, `list`, `watch`, `create`, `update` and `delete` on
/// `leases` in `coordination.k8s.io`, in the group's namespace.
///
/// # Examples
///
/// ```no_run
/// use tend::kube::KubeMembership;
/// use tend::shard::{Membership, ShardCount};
///
/// # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(16)?;
/// let member = KubeMembership::builder(client, "shop", "workers", "replica-1", shards).build()?;
/// member.join().await?;
/// let shard = shards.shard(3).expect("below the count");
/// let token = member.acquire(shard).await?;
/// // ... reconcile the shard's keys, writes fenced with `token` ...
/// member.release(shard, token).await?;
/// member.leave().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubeMembership {
    inner: Arc<Inner>,
}

struct Inner {
    group: String,
    id: MemberId,
    namespace: String,
    shards: ShardCount,
    config: ElectionConfig,
    client: Client,
    leases: Api<Lease>,
    /// The current session (the last join's), live or not.
    session: Mutex<Option<Session>>,
    /// Joins and leaves, one at a time.
    joining: tokio::sync::Mutex<()>,
    /// Shard takes and releases, one at a time per stripe of shards.
    taking: Stripes,
    /// Tokens won for acquires that have not returned them yet.
    unclaimed: Unclaimed,
    /// When this member first saw each member Lease's version (name →
    /// observation), by the view or a live read, for the expiry of other
    /// members' sessions: whichever saw a version first starts its clock.
    observed: Arc<Mutex<HashMap<String, view::Seen>>>,
    view: view::View,
}

/// One membership: from a join to its leave or loss.
#[derive(Clone)]
struct Session {
    /// The member Lease, held under the session's identity.
    election: KubeElection,
    /// The shards owned, by index, with their tokens.
    owned: Arc<Mutex<BTreeMap<u32, FencingToken>>>,
}

impl Session {
    fn identity(&self) -> &str {
        self.election.identity()
    }
}

/// Why a [`KubeMembership`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipBuildError {
    /// The group's name is not a DNS label (RFC 1123: at most 63
    /// lower-case letters, digits and `-`): it is a label value and part
    /// of every Lease's name.
    #[error("group name `{group}` is not a DNS label")]
    InvalidGroup {
        /// The name given.
        group: String,
    },
    /// The member's id is not a DNS subdomain name, or its Lease's name
    /// `{group}-member-{id}` would be too long.
    #[error("member id `{member}` does not make a valid Lease name")]
    InvalidMember {
        /// The id given.
        member: String,
    },
    /// The namespace is not a DNS label.
    #[error("namespace `{namespace}` is not a valid Kubernetes namespace name")]
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
}

/// Configures a [`KubeMembership`]; from [`KubeMembership::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct KubeMembershipBuilder {
    client: Client,
    namespace: String,
    group: String,
    id: String,
    shards: ShardCount,
    config: ElectionConfig,
}

impl fmt::Debug for KubeMembershipBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeMembershipBuilder")
            .field("namespace", &self.namespace)
            .field("group", &self.group)
            .field("id", &self.id)
            .field("shards", &self.shards)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KubeMembershipBuilder {
    /// The Leases' timing (default: [`ElectionConfig::default`],
    /// client-go's 15 s / 10 s / 2 s).
    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }

    /// The member, not joined yet.
    ///
    /// # Errors
    ///
    /// [`MembershipBuildError`] when the namespace, the group's name or
    /// the member's id is one the API server would refuse.
    pub fn build(self) -> Result<KubeMembership, MembershipBuildError> {
        if !names::is_label(&self.namespace) {
            return Err(MembershipBuildError::InvalidNamespace {
                namespace: self.namespace,
            });
        }
        if !names::is_label(&self.group) {
            return Err(MembershipBuildError::InvalidGroup { group: self.group });
        }
        if !names::is_subdomain(&member_lease(&self.group, &self.id)) {
            return Err(MembershipBuildError::InvalidMember { member: self.id });
        }
        let leases = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(KubeMembership {
            inner: Arc::new(Inner {
                view: view::View::new(),
                group: self.group,
                id: MemberId::from(self.id),
                namespace: self.namespace,
                shards: self.shards,
                config: self.config,
                client: self.client,
                leases,
                session: Mutex::new(None),
                joining: tokio::sync::Mutex::new(()),
                taking: Stripes::new(),
                unclaimed: Unclaimed::new(),
                observed: Arc::default(),
            }),
        })
    }
}

/// The name of the Lease of member `id` of `group`.
fn member_lease(group: &str, id: &str) -> String {
    format!("{group}-member-{id}")
}

impl KubeMembership {
    /// Starts configuring the member `id` of the group `group`, whose
    /// Leases live in `namespace` and whose key space is split in `shards`
    /// shards (the same on every member).
    pub fn builder(
        client: Client,
        namespace: impl Into<String>,
        group: impl Into<String>,
        id: impl Into<String>,
        shards: ShardCount,
    ) -> KubeMembershipBuilder {
        KubeMembershipBuilder {
            client,
            namespace: namespace.into(),
            group: group.into(),
            id: id.into(),
            shards,
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
        let owned = session.owned.lock();
        owned
            .iter()
            .filter_map(|(&index, &token)| Some((self.inner.shards.shard(index)?, token)))
            .collect()
    }

    /// Whether `token` is current: this member owns a shard with it, before
    /// its local deadline (the check of a client fenced by the member).
    #[must_use]
    pub fn is_current(&self, token: FencingToken) -> bool {
        self.live()
            .is_some_and(|session| session.owned.lock().values().any(|&t| t == token))
    }

    /// The current session, unless it ended (its local deadline passed).
    fn live(&self) -> Option<Session> {
        let session = self.inner.session.lock().clone()?;
        session.election.is_leader().then_some(session)
    }

    fn member_lease(&self, id: &str) -> String {
        member_lease(&self.inner.group, id)
    }

    fn shard_lease(&self, index: u32) -> String {
        format!("{}-shard-{index}", self.inner.group)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(GROUP_LABEL.to_owned(), self.inner.group.clone())])
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

    /// `request`, failed as timed out after the renew deadline.
    async fn timed<T>(
        &self,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, MembershipError> {
        match tokio::time::timeout(self.inner.config.renew_deadline(), request).await {
            Ok(result) => result.map_err(|error| self.backend(error)),
            Err(_) => Err(self.backend("no answer from the API server within the renew deadline")),
        }
    }
}

impl fmt::Debug for KubeMembership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeMembership")
            .field("namespace", &self.inner.namespace)
            .field("group", &self.inner.group)
            .field("id", &self.inner.id)
            .field("member", &self.is_member())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Membership for KubeMembership {
    fn group(&self) -> &str {
        &self.inner.group
    }

    fn id(&self) -> &MemberId {
        &self.inner.id
    }

    async fn join(&self) -> Result<(), MembershipError> {
        self.start_view();
        self.join_group().await
    }

    fn members(&self) -> watch::Receiver<Vec<MemberId>> {
        self.start_view();
        self.inner.view.members()
    }

    async fn acquire(&self, shard: Shard) -> Result<FencingToken, MembershipError> {
        self.start_view();
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

/// The authority for
/// [`KubeSource::client_fenced_by`](super::KubeSource::client_fenced_by):
/// the member's check, holding no handle of it, so that a fenced client
/// does not keep a dropped member renewing (its tokens are then stale).
impl Fences for KubeMembership {
    fn fencing(&self) -> Arc<dyn Fencing> {
        Arc::new(Detached(Arc::downgrade(&self.inner)))
    }
}

/// [`KubeMembership`]'s check, without keeping the member alive.
struct Detached(std::sync::Weak<Inner>);

impl Fencing for Detached {
    fn is_current(&self, token: FencingToken) -> bool {
        let member = self.0.upgrade().map(|inner| KubeMembership { inner });
        member.is_some_and(|member| member.is_current(token))
    }
}
