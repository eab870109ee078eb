//! Which shards this replica owns now: what a sharded controller's enqueue
//! path and workers consult, and what the manager's sharding changes.
//!
//! # Invariants
//!
//! - A reconcile of a key starts only while the replica owns the key's
//!   shard, and runs under the shard's token ([`Owned::claim`] checks the
//!   owner and counts the reconcile under the slot's lock).
//! - [`Owned::lose`] clears the owner under that lock: no reconcile of the
//!   shard starts after it, and [`Owned::drained`] resolves once the ones
//!   counted before it have ended. Only then is the shard released.
//!
//! Each slot's lock is held for a copy or a counter change, never across an
//! `.await` and never while calling user code; it is taken under no other
//! lock.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::shard::{Shard, ShardCount};

/// The replica's shards: for each, its token while owned and the
/// reconciles of its keys running now (across every controller).
pub(crate) struct Owned {
    count: ShardCount,
    slots: Box<[Slot]>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Woken when the last reconcile of a shard not owned ends.
    idle: Notify,
}

#[derive(Default)]
struct SlotState {
    /// The token while owned.
    token: Option<u64>,
    /// Reconciles of the shard's keys running now.
    running: usize,
    /// Cancelled when a handover's drain bound passes.
    cancel: CancellationToken,
}

impl Owned {
    /// `count` shards, none owned.
    pub(crate) fn new(count: ShardCount) -> Self {
        let slots = count.shards().map(|_| Slot::default()).collect();
        Self { count, slots }
    }

    /// The number of shards keys map to.
    pub(crate) fn count(&self) -> ShardCount {
        self.count
    }

    fn slot(&self, shard: Shard) -> Option<&Slot> {
        self.slots.get(usize::try_from(shard.index()).ok()?)
    }

    /// The shard's token while this replica owns it.
    pub(crate) fn token(&self, shard: Shard) -> Option<u64> {
        self.slot(shard)?.state.lock().token
    }

    /// Every owned shard with its token.
    pub(crate) fn owned(&self) -> Vec<(Shard, u64)> {
        self.count
            .shards()
            .filter_map(|shard| Some((shard, self.token(shard)?)))
            .collect()
    }

    /// The replica acquired `shard` with `token`: its keys may be reconciled.
    pub(crate) fn gain(&self, shard: Shard, token: u64) {
        if let Some(slot) = self.slot(shard) {
            let mut state = slot.state.lock();
            state.token = Some(token);
            if state.cancel.is_cancelled() {
                state.cancel = CancellationToken::new();
            }
        }
    }

    /// The replica is giving `shard` up: no reconcile of its keys starts
    /// from now on. Returns the token it was owned with, and the token that
    /// cancels the reconciles still running.
    pub(crate) fn lose(&self, shard: Shard) -> Option<(u64, CancellationToken)> {
        let slot = self.slot(shard)?;
        let mut state = slot.state.lock();
        let token = state.token.take()?;
        let cancel = state.cancel.clone();
        let idle = state.running == 0;
        drop(state);
        if idle {
            slot.idle.notify_waiters();
        }
        Some((token, cancel))
    }

    /// Resolves once no reconcile of `shard`'s keys runs.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn drained(&self, shard: Shard) {
        let Some(slot) = self.slot(shard) else { return };
        loop {
            let idle = slot.idle.notified();
            tokio::pin!(idle);
            // Registered before looking: an end in between wakes it.
            idle.as_mut().enable();
            if slot.state.lock().running == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Counts a reconcile of one of `shard`'s keys, if it is owned.
    pub(crate) fn claim(self: &Arc<Self>, shard: Shard) -> Option<Claim> {
        let slot = self.slot(shard)?;
        let mut state = slot.state.lock();
        let token = state.token?;
        state.running += 1;
        Some(Claim {
            owned: Arc::clone(self),
            shard,
            token,
            cancel: state.cancel.clone(),
        })
    }

    fn end(&self, shard: Shard) {
        let Some(slot) = self.slot(shard) else { return };
        let mut state = slot.state.lock();
        state.running = state.running.saturating_sub(1);
        let idle = state.running == 0;
        drop(state);
        if idle {
            slot.idle.notify_waiters();
        }
    }
}

/// One running reconcile of an owned shard's key; ends it when dropped.
pub(crate) struct Claim {
    owned: Arc<Owned>,
    shard: Shard,
    /// The shard's fencing token.
    pub(crate) token: u64,
    /// Cancelled when the shard's handover stops waiting for it.
    pub(crate) cancel: CancellationToken,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.owned.end(self.shard);
    }
}

/// How a sharded controller finds a key's shard: the manager's table and
/// `ShardCount::shard_of` for the key type (a plain function, so the
/// controller's key needs no `ShardKey` bound off the sharded path).
pub(crate) struct KeyShards<K> {
    pub(crate) owned: Arc<Owned>,
    pub(crate) shard_of: fn(ShardCount, &K) -> Shard,
}

impl<K> Clone for KeyShards<K> {
    fn clone(&self) -> Self {
        Self {
            owned: Arc::clone(&self.owned),
            shard_of: self.shard_of,
        }
    }
}

impl<K> KeyShards<K> {
    /// The key's shard.
    pub(crate) fn shard(&self, key: &K) -> Shard {
        (self.shard_of)(self.owned.count(), key)
    }

    /// Whether the replica owns the key's shard now.
    pub(crate) fn owns(&self, key: &K) -> bool {
        self.owned.token(self.shard(key)).is_some()
    }
}

/// Whether `key` may be queued: always when not sharded (`None`), else
/// when its shard is owned.
pub(crate) fn wanted<K>(shards: Option<&KeyShards<K>>, key: &K) -> bool {
    shards.is_none_or(|shards| shards.owns(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lost_shard_drains_only_once_its_last_claim_ends() {
        let owned = Arc::new(Owned::new(ShardCount::new(4).unwrap()));
        let shard = owned.count().shard(1).unwrap();
        assert!(owned.claim(shard).is_none(), "not owned yet");
        owned.gain(shard, 7);
        let claim = owned.claim(shard).expect("owned");
        assert_eq!(claim.token, 7);
        let (token, cancel) = owned.lose(shard).expect("was owned");
        assert_eq!(token, 7);
        assert!(owned.claim(shard).is_none(), "no claim after the loss");
        let drained = tokio::time::timeout(std::time::Duration::from_secs(1), owned.drained(shard));
        assert!(drained.await.is_err(), "drained with a claim running");
        cancel.cancel();
        assert!(claim.cancel.is_cancelled());
        drop(claim);
        tokio::time::timeout(std::time::Duration::from_secs(1), owned.drained(shard))
            .await
            .expect("drained once the claim ended");
        owned.gain(shard, 9);
        assert!(
            !owned.claim(shard).unwrap().cancel.is_cancelled(),
            "a fresh cancel token"
        );
    }
}
