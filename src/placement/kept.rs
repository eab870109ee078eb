//! `Kept`: the shards whose objects a sharded replica's scoped caches keep
//! (see [`CacheScope`]): those assigned here, owned, being filled or
//! being drained. The follower sets it; the informers follow it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::informer::{CacheScope, ScopeChanges};
use crate::shard::{Shard, ShardCount, ShardKey};

pub(super) struct Kept {
    count: ShardCount,
    shards: Arc<[AtomicBool]>,
    changes: Arc<ScopeChanges>,
}

impl Kept {
    /// No shard kept.
    pub(super) fn new(count: ShardCount) -> Self {
        Self {
            count,
            shards: count.shards().map(|_| AtomicBool::new(false)).collect(),
            changes: Arc::new(ScopeChanges::new()),
        }
    }

    /// A scope over the keys of the kept shards.
    pub(super) fn scope<K: ShardKey>(&self) -> CacheScope<K> {
        let (count, shards) = (self.count, Arc::clone(&self.shards));
        let keeps = move |key: &K| {
            let shard = count.shard_of(key);
            usize::try_from(shard.index())
                .ok()
                .and_then(|i| shards.get(i))
                .is_some_and(|kept| kept.load(Ordering::Acquire))
        };
        let (count, shards) = (self.count, Arc::clone(&self.shards));
        let kept = move || {
            let flags = count.shards().zip(shards.iter());
            flags
                .filter(|(_, kept)| kept.load(Ordering::Acquire))
                .map(|(shard, _)| shard)
                .collect()
        };
        CacheScope::new(keeps, kept, self.count, Arc::clone(&self.changes))
    }

    /// Whether an informer that still exists keeps only the kept shards:
    /// without one, a gained shard needs no filling.
    pub(super) fn scoped(&self) -> bool {
        self.changes.attached()
    }

    /// Keeps exactly `kept`: the informers list again if it grew, drop
    /// what they no longer keep if it shrank.
    pub(super) fn set(&self, kept: &HashSet<Shard>) {
        let (mut grew, mut shrank) = (false, false);
        for shard in self.count.shards() {
            let Some(flag) = usize::try_from(shard.index())
                .ok()
                .and_then(|i| self.shards.get(i))
            else {
                continue;
            };
            let keep = kept.contains(&shard);
            if flag.swap(keep, Ordering::AcqRel) != keep {
                grew |= keep;
                shrank |= !keep;
            }
        }
        if grew {
            self.changes.widen();
        }
        if shrank {
            self.changes.narrow();
        }
    }

    /// The last growth: a shard kept now is filled once the informers
    /// filled it.
    pub(super) fn generation(&self) -> u64 {
        self.changes.generation()
    }

    /// Resolves once every scoped informer has cached the objects of the
    /// growth `generation`.
    pub(super) async fn filled(&self, generation: u64) {
        self.changes.filled(generation).await;
    }
}

/// Keeps no shard when dropped: held by the sharding's run, so that
/// however it ends (a clean leave, a lost membership, its future dropped)
/// the scoped caches drop what they kept.
pub(super) struct KeepNoneOnDrop<'a>(pub(super) &'a Kept);

impl Drop for KeepNoneOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set(&HashSet::new());
    }
}
