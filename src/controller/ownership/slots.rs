//! `Slots`: the replica's slot table (a shard, or the single slot of a
//! leadership: its token while owned, the reconciles of its keys running),
//! and the `Claim` of one running reconcile.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::client::FencingToken;
use crate::shard::{Shard, ShardCount};

/// How many announcements of gained slots wait for a slow controller
/// before it lags (and then re-reads every owned slot).
const GAINS: usize = 64;

/// The replica's slots: for each, its token while owned and the
/// reconciles of its keys running now (across every controller).
pub(crate) struct Slots {
    count: ShardCount,
    slots: Box<[Slot]>,
    /// How many slots are owned: leader-only workers wait for one.
    pub(super) owned: watch::Sender<usize>,
    /// Slots just gained, for the controllers to queue their keys.
    pub(super) gains: broadcast::Sender<Arc<[Shard]>>,
}

#[derive(Default)]
pub(super) struct Slot {
    pub(super) state: Mutex<SlotState>,
    /// Woken when the last reconcile of a slot not owned ends.
    idle: Notify,
}

#[derive(Default)]
pub(super) struct SlotState {
    /// The token while owned.
    token: Option<FencingToken>,
    /// Reconciles of the slot's keys running now.
    pub(super) running: usize,
    /// Cancelled when a handover's drain bound passes.
    cancel: CancellationToken,
}

impl Slots {
    /// `count` slots, none owned.
    pub(crate) fn new(count: ShardCount) -> Self {
        let slots = count.shards().map(|_| Slot::default()).collect();
        Self {
            count,
            slots,
            owned: watch::Sender::new(0),
            gains: broadcast::Sender::new(GAINS),
        }
    }

    /// The number of slots keys map to.
    pub(crate) fn count(&self) -> ShardCount {
        self.count
    }

    pub(super) fn slot(&self, shard: Shard) -> Option<&Slot> {
        self.slots.get(usize::try_from(shard.index()).ok()?)
    }

    /// The slot's token while this replica owns it.
    pub(crate) fn token(&self, shard: Shard) -> Option<FencingToken> {
        self.slot(shard)?.state.lock().token
    }

    /// Every owned slot with its token.
    pub(crate) fn owned(&self) -> Vec<(Shard, FencingToken)> {
        self.count
            .shards()
            .filter_map(|shard| Some((shard, self.token(shard)?)))
            .collect()
    }

    /// The replica acquired `shard` with `token`: its keys may be reconciled.
    /// A new ownership gets a cancel token of its own: the last one's
    /// belongs to that ownership's handover, which may still cancel it.
    pub(crate) fn gain(&self, shard: Shard, token: FencingToken) {
        if let Some(slot) = self.slot(shard) {
            let mut state = slot.state.lock();
            let new = state.token.is_none();
            if new {
                state.cancel = CancellationToken::new();
            }
            state.token = Some(token);
            drop(state);
            if new {
                self.owned.send_modify(|owned| *owned += 1);
            }
        }
    }

    /// Tells every controller that `gained` were gained (after
    /// [`gain`](Self::gain)), so that they queue those slots' keys.
    pub(crate) fn announce(&self, gained: &[Shard]) {
        if !gained.is_empty() {
            // No receiver: no controller runs yet, and one that starts reads
            // its whole cache anyway.
            let _ = self.gains.send(gained.into());
        }
    }

    /// The replica is giving `shard` up: no reconcile of its keys starts
    /// from now on. Returns the token it was owned with, and the token that
    /// cancels the reconciles still running.
    pub(crate) fn lose(&self, shard: Shard) -> Option<(FencingToken, CancellationToken)> {
        let slot = self.slot(shard)?;
        let mut state = slot.state.lock();
        let token = state.token.take()?;
        let cancel = state.cancel.clone();
        let idle = state.running == 0;
        drop(state);
        self.owned
            .send_modify(|owned| *owned = owned.saturating_sub(1));
        if idle {
            slot.idle.notify_waiters();
        }
        Some((token, cancel))
    }

    /// Loses every owned slot and cancels its reconciles at once (a lost
    /// leadership or membership: another replica may act on them already).
    pub(crate) fn lose_all_now(&self) {
        for (shard, _) in self.owned() {
            if let Some((_, cancel)) = self.lose(shard) {
                cancel.cancel();
            }
        }
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

    /// Resolves once some slot is owned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn any_owned(&self) {
        let mut owned = self.owned.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail here.
        let _ = owned.wait_for(|&owned| owned > 0).await;
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

/// Loses every slot at once when dropped: held by whoever gains slots, so
/// that its future dropped leaves nothing owned.
pub(crate) struct LoseAllOnDrop(pub(crate) Arc<Slots>);

impl Drop for LoseAllOnDrop {
    fn drop(&mut self) {
        self.0.lose_all_now();
    }
}

/// One running reconcile of an owned slot's key; ends it when dropped.
pub(crate) struct Claim {
    owned: Arc<Slots>,
    pub(super) shard: Shard,
    /// The slot's fencing token.
    pub(crate) token: FencingToken,
    /// Cancelled when the slot's handover stops waiting for it.
    pub(crate) cancel: CancellationToken,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.owned.end(self.shard);
    }
}
