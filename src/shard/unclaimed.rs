//! Tokens won for acquires that have not returned them yet, by shard:
//! what the etcd and Kubernetes memberships share to keep `acquire`
//! cancel safe.
//!
//! A take's answer (a `Won`) travels through a channel to its acquire,
//! whose future can be dropped (an aborted task) after the answer was
//! sent and before it was read. While any answer carrying a token is on
//! its way, and no caller has the token, it must not be released; once the
//! last such answer is dropped unread, the token is an orphan, released
//! unless an acquire takes it up first.

use std::collections::HashMap;

use crate::client::FencingToken;
use crate::shard::{MembershipError, Shard, ShardCount};
use parking_lot::Mutex;

/// How many locks the shards' takes and releases are striped over.
const STRIPES: usize = 64;

/// The locks under which a member checks, takes and releases a shard, one
/// per stripe of shards: an orphan's release must not interleave with a
/// new acquire of the same shard (which would return the token the release
/// is about to end).
pub(crate) struct Stripes(Box<[tokio::sync::Mutex<()>]>);

impl Stripes {
    pub(crate) fn new() -> Self {
        Self((0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect())
    }

    /// The lock of shard `index`'s stripe.
    pub(crate) async fn lock(&self, index: u32) -> tokio::sync::MutexGuard<'_, ()> {
        let stripe = usize::try_from(index).unwrap_or(0) % self.0.len();
        self.0[stripe].lock().await
    }
}

/// `shard`'s index, if it is one of `shards` of `group`.
pub(crate) fn index_of(
    group: &str,
    shards: ShardCount,
    shard: Shard,
) -> Result<u32, MembershipError> {
    let index = shard.index();
    if index < shards.get() {
        Ok(index)
    } else {
        Err(MembershipError::UnknownShard {
            group: group.to_owned(),
            shard,
        })
    }
}

/// A member whose tokens an [`Unclaimed`] tracks, and which gives an
/// orphan's shard back.
pub(crate) trait Orphans: Clone + Send + 'static {
    /// The member's unclaimed tokens.
    fn unclaimed(&self) -> &Unclaimed;

    /// Releases shard `index` if its token is still the orphan `token`
    /// (from a task: called in a `Drop`).
    fn release_orphan(&self, index: u32, token: FencingToken);
}

/// An answer carrying a token no caller has yet. Dropped unread as the
/// last such answer, its token is an orphan to give back: an acquire
/// aborted after the answer was sent (abort is asynchronous; its future
/// is dropped later) drops it with the channel.
pub(crate) struct Won<M: Orphans> {
    member: Option<M>,
    index: u32,
    token: FencingToken,
}

impl<M: Orphans> Won<M> {
    pub(crate) fn new(member: &M, index: u32, token: FencingToken) -> Self {
        Self {
            member: Some(member.clone()),
            index,
            token,
        }
    }

    /// The token, returned to the acquire's caller.
    pub(crate) fn returned(mut self) -> FencingToken {
        if let Some(member) = self.member.take() {
            member.unclaimed().returned(self.index, self.token);
        }
        self.token
    }
}

impl<M: Orphans> Drop for Won<M> {
    fn drop(&mut self) {
        if let Some(member) = self.member.take()
            && member.unclaimed().dropped(self.index, self.token)
        {
            member.release_orphan(self.index, self.token);
        }
    }
}

/// See the module docs.
pub(crate) struct Unclaimed(Mutex<HashMap<u32, Pending>>);

struct Pending {
    token: FencingToken,
    /// Answers carrying the token, not yet read or dropped.
    answers: u32,
    /// A caller has the token (an answer was read).
    claimed: bool,
}

impl Unclaimed {
    pub(crate) fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    /// A take won `token` for shard `index`: one answer carries it.
    pub(crate) fn won(&self, index: u32, token: FencingToken) {
        let pending = Pending {
            token,
            answers: 1,
            claimed: false,
        };
        self.0.lock().insert(index, pending);
    }

    /// Whether another acquire's answer may carry `token` as won (it has no
    /// caller yet: otherwise the acquire returns it as owned).
    pub(crate) fn share(&self, index: u32, token: FencingToken) -> bool {
        let mut pending = self.0.lock();
        match pending.get_mut(&index) {
            Some(p) if p.token == token && !p.claimed => {
                p.answers += 1;
                true
            }
            _ => false,
        }
    }

    /// An answer carrying `token` reached its caller.
    pub(crate) fn returned(&self, index: u32, token: FencingToken) {
        let mut pending = self.0.lock();
        if let Some(p) = pending.get_mut(&index).filter(|p| p.token == token) {
            p.claimed = true;
            p.answers = p.answers.saturating_sub(1);
            if p.answers == 0 {
                pending.remove(&index);
            }
        }
    }

    /// An answer carrying `token` was dropped unread: whether the token is
    /// an orphan now (no answer carries it, no caller has it).
    pub(crate) fn dropped(&self, index: u32, token: FencingToken) -> bool {
        let mut pending = self.0.lock();
        let Some(p) = pending.get_mut(&index).filter(|p| p.token == token) else {
            return false;
        };
        p.answers = p.answers.saturating_sub(1);
        if p.answers > 0 {
            return false;
        }
        if p.claimed {
            pending.remove(&index);
            return false;
        }
        true
    }

    /// Takes the orphan `token` for its release, unless an acquire took it
    /// up since.
    pub(crate) fn take_orphan(&self, index: u32, token: FencingToken) -> bool {
        let mut pending = self.0.lock();
        let orphan = pending
            .get(&index)
            .is_some_and(|p| p.token == token && p.answers == 0 && !p.claimed);
        if orphan {
            pending.remove(&index);
        }
        orphan
    }

    /// `token` was released: nothing of it is pending any more.
    pub(crate) fn forget(&self, index: u32, token: FencingToken) {
        let mut pending = self.0.lock();
        if pending.get(&index).is_some_and(|p| p.token == token) {
            pending.remove(&index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_dropped_unread_makes_an_orphan_only_if_no_other_carries_it() {
        let unclaimed = Unclaimed::new();
        unclaimed.won(1, FencingToken::new(10));
        assert!(
            unclaimed.share(1, FencingToken::new(10)),
            "a second answer carries it"
        );
        assert!(
            !unclaimed.dropped(1, FencingToken::new(10)),
            "the second answer still carries it"
        );
        assert!(
            unclaimed.dropped(1, FencingToken::new(10)),
            "no answer left: an orphan"
        );
        assert!(
            unclaimed.share(1, FencingToken::new(10)),
            "an acquire takes the orphan up"
        );
        assert!(
            !unclaimed.take_orphan(1, FencingToken::new(10)),
            "no longer an orphan"
        );
        unclaimed.returned(1, FencingToken::new(10));
        assert!(
            !unclaimed.share(1, FencingToken::new(10)),
            "a caller has it: returned as owned"
        );
        assert!(!unclaimed.take_orphan(1, FencingToken::new(10)));
    }

    #[test]
    fn a_token_read_by_one_caller_is_never_an_orphan() {
        let unclaimed = Unclaimed::new();
        unclaimed.won(2, FencingToken::new(20));
        assert!(unclaimed.share(2, FencingToken::new(20)));
        unclaimed.returned(2, FencingToken::new(20));
        assert!(
            !unclaimed.dropped(2, FencingToken::new(20)),
            "claimed: dropping the other answer is fine"
        );
        assert!(!unclaimed.take_orphan(2, FencingToken::new(20)));
        unclaimed.won(3, FencingToken::new(30));
        assert!(unclaimed.dropped(3, FencingToken::new(30)));
        unclaimed.forget(3, FencingToken::new(30));
        assert!(
            !unclaimed.take_orphan(3, FencingToken::new(30)),
            "released already"
        );
        assert!(
            !unclaimed.dropped(4, FencingToken::new(40)),
            "unknown shards are no orphans"
        );
    }
}
