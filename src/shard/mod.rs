//! Sharding's pure parts: keys to shards, shards to members.
//!
//! A controller run by several replicas spreads its keys over a fixed
//! number of shards ([`ShardCount`], default 256), and each shard over the
//! live members ([`Assignment`]). Both steps are pure functions, the same
//! on every replica, in every process and every version:
//!
//! - **key → shard**: [`ShardCount::shard_of`] scales the key's
//!   [stable hash](StableHasher) (FNV-1a and a fixed finaliser over the
//!   bytes its [`ShardKey`] impl feeds) to the shard count. Not Rust's
//!   `Hash`: its bytes are not specified across platforms and versions, and
//!   two replicas that disagree on a key's shard could both act on it.
//! - **shard → member**: rendezvous (highest random weight) hashing of
//!   (member, shard) with bounded loads: no member gets more than
//!   `⌈shards / members⌉`. A join or a leave moves the joiner's or the
//!   leaver's share and a few shards between the others.
//!
//! Ownership itself is the [`Membership`]'s job: members join a group and
//! see its live set; a member acquires a shard (waiting until its previous
//! owner released it or lost its membership) and gets a fencing token,
//! unique across the group's shards, for every write of that shard's keys.
//! [`MemoryMembership`](crate::memory::MemoryMembership) is the in-process
//! implementation; `tend::etcd::EtcdMembership` (feature `etcd`) holds the
//! group in etcd.

mod assignment;
mod count;
mod hash;
mod membership;
#[cfg(any(feature = "etcd", feature = "kube"))]
pub(crate) mod unclaimed;

pub use self::assignment::{Assignment, MemberId};
pub use self::count::{Shard, ShardCount, ShardCountError};
pub use self::hash::{ShardKey, StableHasher};
pub use self::membership::{Membership, MembershipError};
