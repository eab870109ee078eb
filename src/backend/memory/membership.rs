//! `MemoryMembershipGroup`: a group of members in one process.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::client::FencingToken;
use crate::client::{Fences, Fencing};
use crate::shard::{MemberId, Membership, MembershipError, Shard, ShardCount};

/// A shard's owner and the token it acquired the shard with.
#[derive(Debug, Clone)]
struct Owner {
    member: MemberId,
    token: FencingToken,
}

/// The group's state, changed under the watch's lock.
#[derive(Debug, Default)]
struct State {
    live: BTreeSet<MemberId>,
    /// One entry per shard.
    owners: Vec<Option<Owner>>,
    /// The current tokens and their shards' indexes.
    current: HashMap<FencingToken, usize>,
    last_token: u64,
}

impl State {
    /// Ends `member`'s membership: out of the live set, its shards freed.
    /// Returns whether it was a member.
    fn remove(&mut self, member: &str) -> bool {
        if !self.live.remove(member) {
            return false;
        }
        for owner in &mut self.owners {
            if owner.as_ref().is_some_and(|o| o.member.as_str() == member)
                && let Some(gone) = owner.take()
            {
                self.current.remove(&gone.token);
            }
        }
        true
    }
}

/// A [`Membership`] group among members of one process: for tests, and for
/// running several "replicas" in one process on the memory backend.
///
/// Clones share one group. [`member`](MemoryMembershipGroup::member) makes a
/// member's handle; [`expire`](MemoryMembershipGroup::expire) ends a
/// membership as an expired lease would. Tokens start at 1 and grow by one
/// per acquisition, across all shards. A client fenced by a member
/// ([`MemoryStore::client_fenced_by`](crate::memory::MemoryStore::client_fenced_by))
/// takes a token while its shard is owned with it.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use tend::memory::MemoryMembershipGroup;
/// use tend::shard::{Membership, ShardCount};
///
/// let shards = ShardCount::new(4).unwrap();
/// let group = MemoryMembershipGroup::new("workers", shards);
/// let a = group.member("a");
/// a.join().await.unwrap();
/// let shard = shards.shard(0).unwrap();
/// let token = a.acquire(shard).await.unwrap();
/// assert_eq!(group.owner(shard).map(|(_, owned)| owned), Some(token));
/// a.release(shard, token).await.unwrap();
/// assert_eq!(group.owner(shard), None);
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryMembershipGroup {
    shared: Arc<Shared>,
}

struct Shared {
    group: String,
    shards: ShardCount,
    state: watch::Sender<State>,
    /// Published under `state`'s lock (lock order: `state`, then
    /// `members`), so views are never published out of order.
    members: watch::Sender<Vec<MemberId>>,
}

impl MemoryMembershipGroup {
    /// A new group named `group` over `shards` shards, with no member.
    #[must_use]
    pub fn new(group: impl Into<String>, shards: ShardCount) -> Self {
        let owners = shards.shards().map(|_| None).collect();
        Self {
            shared: Arc::new(Shared {
                group: group.into(),
                shards,
                state: watch::Sender::new(State {
                    owners,
                    ..State::default()
                }),
                members: watch::Sender::new(Vec::new()),
            }),
        }
    }

    /// The group's shard count.
    #[must_use]
    pub fn shard_count(&self) -> ShardCount {
        self.shared.shards
    }

    /// A handle for the member `id`, not joined yet. Handles with the same
    /// id are the same member.
    #[must_use]
    pub fn member(&self, id: impl Into<MemberId>) -> MemoryMembership {
        MemoryMembership {
            group: self.clone(),
            id: id.into(),
        }
    }

    /// The owner of `shard` and its token, if any.
    #[must_use]
    pub fn owner(&self, shard: Shard) -> Option<(MemberId, FencingToken)> {
        let state = self.shared.state.borrow();
        let owner = state.owners.get(index(shard)?)?.as_ref()?;
        Some((owner.member.clone(), owner.token))
    }

    /// Ends `member`'s membership as an expired lease would: it leaves the
    /// set, its shards are free, its tokens stale, its `lost` resolves.
    pub fn expire(&self, member: &str) {
        self.change(|state| state.remove(member));
    }

    /// Runs `change` under the state's lock; publishes the member set when
    /// it returns true.
    fn change<T>(&self, change: impl FnOnce(&mut State) -> T) -> T
    where
        T: Changed,
    {
        let mut out = None;
        self.shared.state.send_if_modified(|state| {
            let result = change(state);
            let changed = result.changed();
            if changed {
                let live: Vec<MemberId> = state.live.iter().cloned().collect();
                self.shared.members.send_if_modified(|members| {
                    let differs = *members != live;
                    *members = live;
                    differs
                });
            }
            out = Some(result);
            changed
        });
        out.expect("send_if_modified runs its closure")
    }
}

/// What a change of state reports: whether anything changed.
trait Changed {
    fn changed(&self) -> bool;
}

impl Changed for bool {
    fn changed(&self) -> bool {
        *self
    }
}

/// An acquisition attempt: the token, and whether it is a new one.
impl Changed for Result<Option<(FencingToken, bool)>, MembershipError> {
    fn changed(&self) -> bool {
        matches!(self, Ok(Some((_, true))))
    }
}

fn index(shard: Shard) -> Option<usize> {
    usize::try_from(shard.index()).ok()
}

impl fmt::Debug for MemoryMembershipGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.borrow();
        f.debug_struct("MemoryMembershipGroup")
            .field("group", &self.shared.group)
            .field("shards", &self.shared.shards)
            .field("live", &state.live)
            .field("last_token", &state.last_token)
            .finish()
    }
}

/// A memory backend fenced by a member
/// ([`MemoryStore::client_fenced_by`](crate::memory::MemoryStore::client_fenced_by);
/// pass the member the replica runs, not a handle made for the purpose:
/// handles with one id are one member, and dropping one ends it)
/// takes a write only while its token is one of the group's shards'
/// current tokens. The check holds the group, not the member: it does not
/// keep the membership alive.
impl Fences for MemoryMembership {
    fn fencing(&self) -> Arc<dyn Fencing> {
        Arc::new(ShardTokens(self.group.clone()))
    }
}

/// The group's check: whether a token is a shard's current one.
struct ShardTokens(MemoryMembershipGroup);

impl Fencing for ShardTokens {
    fn is_current(&self, token: FencingToken) -> bool {
        self.0.shared.state.borrow().current.contains_key(&token)
    }
}

/// One member of an [`MemoryMembershipGroup`]; dropping it leaves.
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryMembershipGroup;
/// use tend::shard::{Membership, ShardCount};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(2)?;
/// let group = MemoryMembershipGroup::new("workers", shards);
/// let (a, b) = (group.member("a"), group.member("b"));
/// a.join().await?;
/// b.join().await?;
/// let shard = shards.shard(0).unwrap();
/// let token = a.acquire(shard).await?;
/// assert_eq!(b.try_acquire(shard)?, None); // `a` owns it
/// assert_eq!(a.owned(), [(shard, token)]);
///
/// group.expire("a"); // as an expired lease: its shards are free
/// a.lost().await;
/// assert!(b.try_acquire(shard)?.is_some_and(|newer| newer > token));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryMembership {
    group: MemoryMembershipGroup,
    id: MemberId,
}

impl MemoryMembership {
    /// Owns `shard` if it has no owner; `None` when another member owns it.
    ///
    /// # Errors
    ///
    /// As [`Membership::acquire`].
    pub fn try_acquire(&self, shard: Shard) -> Result<Option<FencingToken>, MembershipError> {
        let attempt = self.group.change(|state| self.attempt(state, shard));
        attempt.map(|won| won.map(|(token, _)| token))
    }

    /// The shards this member owns, with their tokens, in order.
    #[must_use]
    pub fn owned(&self) -> Vec<(Shard, FencingToken)> {
        let state = self.group.shared.state.borrow();
        self.group
            .shared
            .shards
            .shards()
            .zip(&state.owners)
            .filter_map(|(shard, owner)| {
                let owner = owner.as_ref().filter(|o| o.member == self.id)?;
                Some((shard, owner.token))
            })
            .collect()
    }

    fn attempt(
        &self,
        state: &mut State,
        shard: Shard,
    ) -> Result<Option<(FencingToken, bool)>, MembershipError> {
        let group = &self.group.shared.group;
        if !state.live.contains(&self.id) {
            return Err(MembershipError::NotJoined {
                group: group.clone(),
                member: self.id.clone(),
            });
        }
        let unknown = || MembershipError::UnknownShard {
            group: group.clone(),
            shard,
        };
        let at = index(shard).ok_or_else(unknown)?;
        let number = state.last_token + 1;
        let next = FencingToken::new(number);
        let slot = state.owners.get_mut(at).ok_or_else(unknown)?;
        match slot {
            Some(owner) if owner.member == self.id => Ok(Some((owner.token, false))),
            Some(_) => Ok(None),
            None => {
                *slot = Some(Owner {
                    member: self.id.clone(),
                    token: next,
                });
                state.last_token = number;
                state.current.insert(next, at);
                Ok(Some((next, true)))
            }
        }
    }
}

#[async_trait]
impl Membership for MemoryMembership {
    fn group(&self) -> &str {
        &self.group.shared.group
    }

    fn id(&self) -> &MemberId {
        &self.id
    }

    async fn join(&self) -> Result<(), MembershipError> {
        self.group
            .change(|state| state.live.insert(self.id.clone()));
        Ok(())
    }

    fn members(&self) -> watch::Receiver<Vec<MemberId>> {
        self.group.shared.members.subscribe()
    }

    async fn acquire(&self, shard: Shard) -> Result<FencingToken, MembershipError> {
        // Subscribed before each attempt: a release after it wakes us.
        let mut changes = self.group.shared.state.subscribe();
        loop {
            if let Some(token) = self.try_acquire(shard)? {
                return Ok(token);
            }
            // The sender lives as long as `self`: this cannot fail.
            let _ = changes.changed().await;
        }
    }

    async fn release(&self, shard: Shard, token: FencingToken) -> Result<(), MembershipError> {
        self.group.change(|state| {
            let Some(slot) = index(shard).and_then(|at| state.owners.get_mut(at)) else {
                return false;
            };
            let ours = slot
                .as_ref()
                .is_some_and(|o| o.member == self.id && o.token == token);
            if ours {
                *slot = None;
                state.current.remove(&token);
            }
            ours
        });
        Ok(())
    }

    async fn lost(&self) {
        let mut changes = self.group.shared.state.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = changes
            .wait_for(|state| !state.live.contains(&self.id))
            .await;
    }

    async fn leave(&self) -> Result<(), MembershipError> {
        self.group.expire(self.id.as_str());
        Ok(())
    }
}

impl Drop for MemoryMembership {
    fn drop(&mut self) {
        self.group.expire(self.id.as_str());
    }
}
