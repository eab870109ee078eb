//! `Assignment`: shards to members by rendezvous hashing with bounded
//! loads.

use std::borrow::Borrow;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt;
use std::sync::Arc;

use super::count::{Shard, ShardCount};
use super::hash::{ShardKey, mix};

/// A member's identity: the same string on every replica (a membership
/// record's name, say `replica-0`).
///
/// # Examples
///
/// ```
/// use tend::shard::{Assignment, MemberId, ShardCount};
///
/// let id = MemberId::from("replica-0");
/// assert_eq!((id.as_str(), id.to_string()), ("replica-0", "replica-0".to_owned()));
/// let assignment = Assignment::compute(["replica-1", "replica-0"], ShardCount::new(4)?);
/// assert_eq!(assignment.members()[0], id); // members are sorted
/// assert_eq!(assignment.shards_of("replica-0").count(), 2); // half of the shards
/// # Ok::<(), tend::shard::ShardCountError>(())
/// ```
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
/// Every (member, shard) pair has a *rendezvous weight*, a
/// [stable hash](super::StableHasher) of both. Pairs are taken from the
/// heaviest down, each member taking at most `⌈shards / members⌉` shards:
/// a shard goes to the member of highest weight that still has room (equal
/// weights go to the greater id, then the greater shard). So shares are
/// exactly balanced (none over the ceiling of the mean: for 256 shards and
/// 3 members, 86 at most), and a join or a leave moves the joiner's or the
/// leaver's share plus a few shards between the others, as their room
/// changes (about `√shards` at most; the property tests bound it by
/// `2⌈√shards⌉ + 2`). Plain rendezvous hashing moves only the joiner's or
/// leaver's shards but leaves shares binomial (85 ± 8 of 256 over 3),
/// and the largest share is what bounds a group's throughput.
///
/// Computing it costs `O(shards × members)` weights, plus a heap operation
/// per shard and per shard whose favourite member was full.
///
/// The function is part of a group's protocol: every replica of one group
/// must run the same version of it (this one replaced plain rendezvous
/// hashing; replicas computing different assignments leave some shards
/// waiting for an owner that never acquires them).
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
            assign(&seeds, shards)
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

/// A shard's best pair among the members with room: ordered by weight,
/// then member index, then shard index (the heap pops the greatest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    weight: u64,
    member: u32,
    shard: u32,
}

/// Each shard's owner's index: the pairs taken heaviest first, each member
/// up to its room. A shard popped for a member that filled up meanwhile is
/// pushed again with its best member that still has room; since members
/// only fill up, every entry bounds its shard's real best, so the one
/// popped is the heaviest pair still possible.
fn assign(seeds: &[u64], shards: ShardCount) -> Vec<u32> {
    let count = usize::try_from(shards.get()).unwrap_or(usize::MAX);
    let room = count.div_ceil(seeds.len());
    let mut load = vec![0usize; seeds.len()];
    let mut owners = vec![0u32; count];
    let mut heap: BinaryHeap<Candidate> = shards
        .shards()
        .filter_map(|shard| best(seeds, shard, &load, room))
        .collect();
    while let Some(candidate) = heap.pop() {
        let member = usize::try_from(candidate.member).unwrap_or(usize::MAX);
        match load.get_mut(member) {
            Some(taken) if *taken < room => {
                *taken += 1;
                if let Some(owner) = usize::try_from(candidate.shard)
                    .ok()
                    .and_then(|index| owners.get_mut(index))
                {
                    *owner = candidate.member;
                }
            }
            _ => {
                let shard = shards.shard(candidate.shard);
                heap.extend(shard.and_then(|shard| best(seeds, shard, &load, room)));
            }
        }
    }
    owners
}

/// The heaviest pair of `shard` with a member that has room (`None` if
/// none has: never, as the rooms add up to at least the shard count).
fn best(seeds: &[u64], shard: Shard, load: &[usize], room: usize) -> Option<Candidate> {
    let salt = mix(u64::from(shard.index()) ^ SHARD_SALT);
    seeds
        .iter()
        .zip(load)
        .enumerate()
        .filter(|&(_, (_, &taken))| taken < room)
        .map(|(index, (&seed, _))| Candidate {
            weight: mix(seed ^ salt),
            // Members are few (a `Vec` of them fits in memory).
            member: u32::try_from(index).unwrap_or(u32::MAX),
            shard: shard.index(),
        })
        .max()
}

/// Keeps shard 0's salt from being `mix(0) = 0`.
const SHARD_SALT: u64 = 0x9e37_79b9_7f4a_7c15;
