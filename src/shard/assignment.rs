//! `Assignment`: shards to members by rendezvous hashing.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::count::{Shard, ShardCount};
use super::hash::{ShardKey, mix};

/// A member's identity: the same string on every replica (a membership
/// record's name, say `replica-0`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(Arc<str>);

impl MemberId {
    /// The identity as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<T: Into<Arc<str>>> From<T> for MemberId {
    fn from(id: T) -> Self {
        Self(id.into())
    }
}

impl Borrow<str> for MemberId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which member owns each shard: a pure function of the set of members and
/// the shard count, so every replica that sees the same membership computes
/// the same assignment.
///
/// Each shard goes to the member with the highest *rendezvous weight*, a
/// [stable hash](super::StableHasher) of (member, shard); equal weights go to the
/// greater id. So a member that joins takes exactly the shards for which
/// its weight beats every other member's (about `1/N` of them, taken evenly
/// from the others) and a member that leaves hands over exactly its own:
/// no other shard changes owner. The price is balance: each member's share
/// is binomial (for 256 shards and 3 members, 85 ± 8), not exactly equal.
///
/// # Examples
///
/// ```
/// use tend::shard::{Assignment, ShardCount};
///
/// let shards = ShardCount::new(16).unwrap();
/// let assignment = Assignment::compute(["replica-0", "replica-1"], shards);
/// let owner = assignment.owner_of("web-1").unwrap();
/// assert!(assignment.shards_of(owner.as_str()).any(|s| s == shards.shard_of("web-1")));
/// // The same set, in any order, gives the same assignment.
/// assert_eq!(assignment, Assignment::compute(["replica-1", "replica-0"], shards));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    shards: ShardCount,
    /// Sorted, without duplicates.
    members: Vec<MemberId>,
    /// For each shard, its owner's index in `members` (empty when there
    /// are no members).
    owners: Vec<u32>,
}

impl Assignment {
    /// The assignment of `shards` to `members` (duplicates count once; no
    /// member: no shard has an owner).
    pub fn compute<I>(members: I, shards: ShardCount) -> Self
    where
        I: IntoIterator,
        I::Item: Into<MemberId>,
    {
        let members: Vec<MemberId> = members
            .into_iter()
            .map(Into::into)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let seeds: Vec<u64> = members.iter().map(|m| m.as_str().stable_hash()).collect();
        let owners = if seeds.is_empty() {
            Vec::new()
        } else {
            shards.shards().map(|shard| winner(&seeds, shard)).collect()
        };
        Self {
            shards,
            members,
            owners,
        }
    }

    /// The shard count.
    #[must_use]
    pub fn shard_count(&self) -> ShardCount {
        self.shards
    }

    /// The members, sorted.
    #[must_use]
    pub fn members(&self) -> &[MemberId] {
        &self.members
    }

    /// The owner of `shard` (`None` without members, or for a shard of
    /// another count).
    #[must_use]
    pub fn owner(&self, shard: Shard) -> Option<&MemberId> {
        let index = *self.owners.get(usize::try_from(shard.index()).ok()?)?;
        self.members.get(usize::try_from(index).ok()?)
    }

    /// The owner of the shard `key` is in.
    #[must_use]
    pub fn owner_of<K: ShardKey + ?Sized>(&self, key: &K) -> Option<&MemberId> {
        self.owner(self.shards.shard_of(key))
    }

    /// The shards `member` owns, in order (none for a stranger).
    pub fn shards_of<'a>(&'a self, member: &'a str) -> impl Iterator<Item = Shard> + 'a {
        let index = self
            .members
            .binary_search_by(|m| m.as_str().cmp(member))
            .ok();
        self.shards
            .shards()
            .zip(&self.owners)
            .filter(move |&(_, &owner)| usize::try_from(owner).ok() == index)
            .map(|(shard, _)| shard)
    }

    /// The shards whose owner differs between `self` and `other` (of the
    /// same count; with another count, every shard of `self`): the
    /// handovers a change of membership causes.
    pub fn moved<'a>(&'a self, other: &'a Self) -> impl Iterator<Item = Shard> + 'a {
        self.shards.shards().filter(move |&shard| {
            self.shards != other.shards || self.owner(shard) != other.owner(shard)
        })
    }
}

/// The index of the member with the highest weight for `shard`; ties go to
/// the later (greater) member.
fn winner(seeds: &[u64], shard: Shard) -> u32 {
    let salt = mix(u64::from(shard.index()) ^ SHARD_SALT);
    let mut best = (0, 0);
    for (index, &seed) in seeds.iter().enumerate() {
        let weight = mix(seed ^ salt);
        if weight >= best.0 {
            best = (weight, index);
        }
    }
    // `seeds` has one entry per member, and members are few (a `Vec` of them
    // fits in memory), so the index fits a u32 unless there are billions.
    u32::try_from(best.1).unwrap_or(u32::MAX)
}

/// Keeps shard 0's salt from being `mix(0) = 0`.
const SHARD_SALT: u64 = 0x9e37_79b9_7f4a_7c15;
