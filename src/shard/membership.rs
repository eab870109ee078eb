//! `Membership`: the live members of a group, and who owns each shard.

use async_trait::async_trait;
use tokio::sync::watch;

use super::assignment::MemberId;
use super::count::Shard;
use crate::client::FencingToken;
use crate::error::BoxError;

/// Why a membership call failed.
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryMembershipGroup;
/// use tend::shard::{Membership, MembershipError, ShardCount};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(4)?;
/// let member = MemoryMembershipGroup::new("workers", shards).member("a");
/// let shard = shards.shard(0).unwrap();
/// let error = member.acquire(shard).await.unwrap_err(); // before `join`
/// assert!(matches!(error, MembershipError::NotJoined { .. }));
/// assert_eq!(error.to_string(), "`a` is not a member of group `workers`");
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// The membership's backend (a lease store, a lock service) failed.
    #[error("membership of group `{group}` failed")]
    Backend {
        /// The group's name.
        group: String,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
    /// The member has not joined, or its membership ended (it left, or its
    /// lease expired): it owns nothing and can acquire nothing.
    #[error("`{member}` is not a member of group `{group}`")]
    NotJoined {
        /// The group's name.
        group: String,
        /// The member's id.
        member: MemberId,
    },
    /// The shard is not below the group's shard count.
    #[error("group `{group}` has no shard {shard}")]
    UnknownShard {
        /// The group's name.
        group: String,
        /// The shard asked for.
        shard: Shard,
    },
}

/// One member of a group of replicas that share the shards of a key space.
///
/// A member [`join`](Membership::join)s (in etcd: a record bound to its
/// lease), then every member sees it in [`members`](Membership::members);
/// each computes the same [`Assignment`](super::Assignment) from that set.
/// Seeing a shard assigned to itself is not owning it: a member
/// [`acquire`](Membership::acquire)s a shard, which waits until the shard
/// has no owner (its previous owner [`release`](Membership::release)d it
/// after its last reconcile, or lost its membership), and only then acts on
/// the shard's keys, fencing every write with the shard's token.
///
/// # Invariants
///
/// - A shard has at most one owner at a time.
/// - Each acquisition returns a fencing token greater than any token of any
///   shard of the group before it, so tokens are unique across shards; a
///   token is current from its acquisition until its release or its
///   owner's loss of membership, and never again.
/// - The member set is a view, eventually consistent: safety rests on
///   ownership and tokens, never on two members seeing the same set.
///
/// The in-process implementation is
/// [`MemoryMembershipGroup`](crate::memory::MemoryMembershipGroup); it implements
/// [`Fencing`](crate::client::Fencing) over the shards' tokens. The etcd
/// one is `tend::etcd::EtcdMembership` (feature `etcd`).
///
/// # Examples
///
/// Code written against the trait, run here on the in-process group:
///
/// ```
/// use tend::memory::MemoryMembershipGroup;
/// use tend::shard::{Membership, MembershipError, ShardCount};
///
/// /// Owns shard 0 for a while, then leaves the group.
/// async fn serve_first(member: &impl Membership, shards: ShardCount) -> Result<(), MembershipError> {
///     member.join().await?;
///     let shard = shards.shard(0).expect("a count is at least 1");
///     let token = member.acquire(shard).await?; // waits until no one owns it
///     // … reconcile the shard's keys, fencing every write with `token` …
///     member.release(shard, token).await?;
///     member.leave().await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(4)?;
/// let group = MemoryMembershipGroup::new("workers", shards);
/// let member = group.member("replica-0");
/// serve_first(&member, shards).await?;
/// assert!(member.members().borrow().is_empty()); // it left
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Membership: Send + Sync + 'static {
    /// The group's name.
    fn group(&self) -> &str;

    /// This member's id.
    fn id(&self) -> &MemberId;

    /// Joins the group (harmless when joined).
    ///
    /// # Errors
    ///
    /// [`MembershipError::Backend`] when the backend fails.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: a dropped join may or may not have joined.
    async fn join(&self) -> Result<(), MembershipError>;

    /// The live members, sorted, this member included once joined.
    fn members(&self) -> watch::Receiver<Vec<MemberId>>;

    /// Waits until `shard` has no owner, then owns it; returns its token
    /// (at once, with the same token, when this member owns it already).
    ///
    /// # Errors
    ///
    /// [`MembershipError::NotJoined`] when not a member (also when the
    /// membership ends while waiting), [`MembershipError::UnknownShard`],
    /// [`MembershipError::Backend`].
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: a dropped call acquires nothing.
    async fn acquire(&self, shard: Shard) -> Result<FencingToken, MembershipError>;

    /// Gives `shard` up, if this member owns it with `token` (harmless
    /// otherwise), so that its next owner can acquire it at once.
    ///
    /// # Errors
    ///
    /// [`MembershipError::Backend`]; the shard is then freed when this
    /// member's membership ends.
    ///
    /// # Cancel safety
    ///
    /// Should be cancel safe: a dropped call may or may not have released
    /// the shard; one still owned is freed when the membership ends. (The
    /// etcd membership first stops counting `token` as current, then
    /// deletes the shard's record; the memory one releases in its first
    /// poll.)
    async fn release(&self, shard: Shard, token: FencingToken) -> Result<(), MembershipError>;

    /// Resolves once this member's membership has ended (at once when not
    /// a member): every shard it owned is lost, and its tokens are stale.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe.
    async fn lost(&self);

    /// Leaves the group, releasing every shard it owns.
    ///
    /// # Errors
    ///
    /// [`MembershipError::Backend`]; the membership then ends when the
    /// backend's lease expires.
    ///
    /// # Cancel safety
    ///
    /// Should be cancel safe: a dropped call may or may not have left; a
    /// membership left in place ends when the backend's lease expires.
    /// (The etcd membership first ends its session and stops renewing, so
    /// [`lost`](Membership::lost) resolves, then revokes its lease; the
    /// memory one leaves in its first poll.)
    async fn leave(&self) -> Result<(), MembershipError>;
}
