//! Which keys this replica may reconcile now: the one interface between a
//! controller and whoever decides where it runs (a leader election, a
//! shard membership, or nobody).
//!
//! An [`Ownership`] maps each key to a slot of an [`Slots`] table (a shard,
//! or the single slot of a leadership). A slot is owned with a fencing
//! token, or not owned; a reconcile of a key starts only while its slot is
//! owned, and runs under the slot's token. What happens to a key whose
//! slot is not owned depends on why: a sharded controller *skips* it (its
//! owner elsewhere reconciles it, and the slot's keys are queued again from
//! the cache if it is gained here), a leader-only controller *keeps* it
//! queued and waits (a warm standby: nothing to replay on winning).
//!
//! # Invariants
//!
//! - A reconcile of a key starts only while the replica owns the key's
//!   slot, and runs under the slot's token ([`Slots::claim`] checks the
//!   owner and counts the reconcile under the slot's lock).
//! - [`Slots::lose`] clears the owner under that lock: no reconcile of the
//!   slot starts after it, and [`Slots::drained`] resolves once the ones
//!   counted before it have ended. Only then is the slot released.
//! - Each ownership (a [`Slots::gain`] of a slot not owned) has its own
//!   cancel token, the one the [`Slots::lose`] ending it returns: a
//!   handover's cancel reaches only the reconciles of the ownership it
//!   ended, never those of a later one.
//!
//! The tests check these against a model, on random sequences of gains,
//! losses, claims, drops and cancels.
//!
//! Each slot's lock is held for a copy or a counter change, never across an
//! `.await` and never while calling user code; it is taken under no other
//! lock.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::client::FencingToken;
use crate::shard::{Shard, ShardCount, ShardKey};

/// How many announcements of gained slots wait for a slow controller
/// before it lags (and then re-reads every owned slot).
const GAINS: usize = 64;

/// The replica's slots: for each, its token while owned and the
/// reconciles of its keys running now (across every controller).
pub(crate) struct Slots {
    count: ShardCount,
    slots: Box<[Slot]>,
    /// How many slots are owned: leader-only workers wait for one.
    owned: watch::Sender<usize>,
    /// Slots just gained, for the controllers to queue their keys.
    gains: broadcast::Sender<Arc<[Shard]>>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Woken when the last reconcile of a slot not owned ends.
    idle: Notify,
}

#[derive(Default)]
struct SlotState {
    /// The token while owned.
    token: Option<FencingToken>,
    /// Reconciles of the slot's keys running now.
    running: usize,
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

    fn slot(&self, shard: Shard) -> Option<&Slot> {
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
    shard: Shard,
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

/// What a worker may do with a key it was handed.
pub(crate) enum Claimed {
    /// Reconcile it, under this claim (`None`: every key is this
    /// replica's, with no fencing token).
    Run(Option<Claim>),
    /// End it unreconciled: another replica owns it.
    Skip,
    /// Keep it queued and wait until this replica may reconcile again.
    Wait,
}

/// Which keys a controller may reconcile now, and with which fencing
/// token: handed to it in its [`Environment`](super::Environment) by
/// whoever decides where it runs. Get one from
/// [`Sharding::ownership`](crate::placement::Sharding::ownership) (the keys
/// of the shards this replica owns) or
/// [`Leadership::ownership`](crate::placement::Leadership::ownership)
/// (every key, while this replica leads).
pub struct Ownership<K> {
    owned: Arc<Slots>,
    slot_of: fn(ShardCount, &K) -> Shard,
    mode: Mode,
}

/// What a key whose slot is not owned does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Sharded: not queued, and skipped if handed out.
    Skip,
    /// Leader-only: queued, and waited for.
    Wait,
}

impl<K> Clone for Ownership<K> {
    fn clone(&self) -> Self {
        Self {
            owned: Arc::clone(&self.owned),
            slot_of: self.slot_of,
            mode: self.mode,
        }
    }
}

impl<K> fmt::Debug for Ownership<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ownership")
            .field("slots", &self.owned.count().get())
            .field("owned", &*self.owned.owned.borrow())
            .field("sharded", &(self.mode == Mode::Skip))
            .finish()
    }
}

impl<K: ShardKey> Ownership<K> {
    /// The keys of `owned`'s shards that are owned; the others are skipped.
    pub(crate) fn sharded(owned: Arc<Slots>) -> Self {
        Self {
            owned,
            slot_of: shard_of::<K>,
            mode: Mode::Skip,
        }
    }
}

impl<K> Ownership<K> {
    /// Every key while `owned`'s single slot is owned; kept queued otherwise.
    pub(crate) fn leader(owned: Arc<Slots>) -> Self {
        Self {
            owned,
            slot_of: first_slot::<K>,
            mode: Mode::Wait,
        }
    }

    /// The key's slot.
    pub(crate) fn slot(&self, key: &K) -> Shard {
        (self.slot_of)(self.owned.count(), key)
    }

    /// Whether `key` may be queued now: sharded, only while its shard is
    /// owned; leader-only, always.
    pub(crate) fn wants(&self, key: &K) -> bool {
        self.mode == Mode::Wait || self.owned.token(self.slot(key)).is_some()
    }

    /// Counts a reconcile of `key`, if its slot is owned.
    pub(crate) fn claim(&self, key: &K) -> Claimed {
        match self.owned.claim(self.slot(key)) {
            Some(claim) => Claimed::Run(Some(claim)),
            None if self.mode == Mode::Skip => Claimed::Skip,
            None => Claimed::Wait,
        }
    }

    /// Whether keys not owned are skipped (their slot is re-read when
    /// gained), rather than kept.
    pub(crate) fn skips(&self) -> bool {
        self.mode == Mode::Skip
    }

    /// Resolves once this replica may reconcile some key.
    pub(crate) async fn active(&self) {
        self.owned.any_owned().await;
    }

    /// Announcements of slots gained, from now on.
    pub(crate) fn gains(&self) -> broadcast::Receiver<Arc<[Shard]>> {
        self.owned.gains.subscribe()
    }

    /// How many slots keys map to.
    pub(crate) fn slot_count(&self) -> ShardCount {
        self.owned.count()
    }

    /// The slots owned now.
    pub(crate) fn owned_slots(&self) -> Vec<Shard> {
        self.owned
            .owned()
            .into_iter()
            .map(|(slot, _)| slot)
            .collect()
    }
}

/// A key's shard: `ShardCount::shard_of` as a plain function, so that an
/// ownership keeps it without a `ShardKey` bound on its type.
fn shard_of<K: ShardKey>(count: ShardCount, key: &K) -> Shard {
    count.shard_of(key)
}

fn first_slot<K>(count: ShardCount, _: &K) -> Shard {
    count.shard_of(&0_u64)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};

    use futures::FutureExt;
    use futures::task::ArcWake;
    use proptest::prelude::*;

    use super::*;

    /// Shards of the table under test; ops also name two beyond it.
    const SHARDS: u32 = 3;

    #[derive(Debug, Clone)]
    enum Op {
        Gain(u32, FencingToken),
        Lose(u32),
        Claim(u32),
        /// Drops the claim at this index (modulo the live claims).
        Drop(usize),
        /// Cancels the token the shard's last `lose` returned (its
        /// handover's drain bound passed).
        Cancel(u32),
        /// Starts waiting for the shard to drain.
        Wait(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let shard = 0..SHARDS + 2;
        prop_oneof![
            2 => (shard.clone(), 1..4u64).prop_map(|(s, t)| Op::Gain(s, FencingToken::new(t))),
            2 => shard.clone().prop_map(Op::Lose),
            3 => shard.clone().prop_map(Op::Claim),
            3 => any::<usize>().prop_map(Op::Drop),
            1 => shard.clone().prop_map(Op::Cancel),
            1 => shard.prop_map(Op::Wait),
        ]
    }

    /// One shard as the model sees it.
    #[derive(Debug, Default)]
    struct ModelShard {
        token: Option<FencingToken>,
        /// Counts ownerships: a gain of a shard not owned starts one.
        ownership: u64,
        /// What the last `lose` returned: the ownership it ended and its
        /// cancel token.
        lost: Option<(u64, CancellationToken)>,
    }

    /// A claim taken, with the ownership it was taken under.
    struct Taken {
        claim: Claim,
        ownership: u64,
    }

    /// A `drained`, whether it was polled, and whether it was woken since
    /// its last poll.
    struct Waiter<'a> {
        shard: u32,
        future: Pin<Box<dyn Future<Output = ()> + 'a>>,
        polled: bool,
        woken: Arc<Woken>,
    }

    #[derive(Default)]
    struct Woken(AtomicBool);

    impl ArcWake for Woken {
        fn wake_by_ref(woken: &Arc<Self>) {
            woken.0.store(true, Ordering::SeqCst);
        }
    }

    impl Waiter<'_> {
        /// Polls it once, clearing the woken flag.
        fn poll(&mut self) -> Poll<()> {
            self.polled = true;
            self.woken.0.store(false, Ordering::SeqCst);
            let waker = futures::task::waker(Arc::clone(&self.woken));
            self.future.as_mut().poll(&mut Context::from_waker(&waker))
        }

        fn woken(&self) -> bool {
            self.woken.0.load(Ordering::SeqCst)
        }
    }

    /// The table under test, a model of it, the claims taken and the
    /// waiters for a drain.
    struct Run<'a> {
        owned: &'a Arc<Slots>,
        /// A shard count covering the ops' extra shards.
        wide: ShardCount,
        model: Vec<ModelShard>,
        taken: Vec<Taken>,
        waiters: Vec<Waiter<'a>>,
        /// Ownerships whose handover cancelled their reconciles.
        cancelled: HashMap<u32, Vec<u64>>,
    }

    impl<'a> Run<'a> {
        fn new(owned: &'a Arc<Slots>) -> Self {
            Self {
                owned,
                wide: ShardCount::new(SHARDS + 2).unwrap(),
                model: (0..SHARDS).map(|_| ModelShard::default()).collect(),
                taken: Vec::new(),
                waiters: Vec::new(),
                cancelled: HashMap::new(),
            }
        }

        fn shard(&self, index: u32) -> Shard {
            self.wide.shard(index).unwrap()
        }

        fn live(&self, index: u32) -> usize {
            self.taken
                .iter()
                .filter(|t| t.claim.shard.index() == index)
                .count()
        }

        fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
            match *op {
                Op::Gain(index, token) => {
                    self.owned.gain(self.shard(index), token);
                    if let Some(model) = self.model.get_mut(index as usize) {
                        if model.token.is_none() {
                            model.ownership += 1;
                        }
                        model.token = Some(token);
                    }
                }
                Op::Lose(index) => {
                    let lost = self.owned.lose(self.shard(index));
                    let model = self.model.get_mut(index as usize);
                    let expected = model.as_ref().and_then(|m| m.token);
                    prop_assert_eq!(lost.as_ref().map(|(t, _)| *t), expected, "lose {}", index);
                    if let (Some(model), Some((_, cancel))) = (model, lost) {
                        model.token = None;
                        model.lost = Some((model.ownership, cancel));
                    }
                }
                Op::Claim(index) => {
                    let claim = self.owned.claim(self.shard(index));
                    let model = self.model.get(index as usize);
                    let expected = model.and_then(|m| m.token);
                    prop_assert_eq!(claim.as_ref().map(|c| c.token), expected, "claim {}", index);
                    if let (Some(model), Some(claim)) = (model, claim) {
                        let ownership = model.ownership;
                        self.taken.push(Taken { claim, ownership });
                    }
                }
                Op::Drop(at) => {
                    if !self.taken.is_empty() {
                        drop(self.taken.swap_remove(at % self.taken.len()));
                    }
                }
                Op::Cancel(index) => {
                    let lost = self.model.get(index as usize).and_then(|m| m.lost.as_ref());
                    if let Some((ownership, cancel)) = lost {
                        cancel.cancel();
                        self.cancelled.entry(index).or_default().push(*ownership);
                    }
                }
                Op::Wait(index) => {
                    let owned: &'a Slots = self.owned;
                    self.waiters.push(Waiter {
                        shard: index,
                        future: Box::pin(owned.drained(self.shard(index))),
                        polled: false,
                        woken: Arc::default(),
                    });
                }
            }
            Ok(())
        }

        /// Every shard's token, count and cancellations as the model says;
        /// `drained` ready exactly for the shards with no claim running, and
        /// a waiter woken by the drop of its shard's last claim.
        fn check(&mut self) -> Result<(), TestCaseError> {
            let expected: Vec<(Shard, FencingToken)> = (0..SHARDS)
                .filter_map(|i| Some((self.shard(i), self.model[i as usize].token?)))
                .collect();
            prop_assert_eq!(self.owned.owned(), expected);
            for index in 0..SHARDS + 2 {
                let shard = self.shard(index);
                let live = self.live(index);
                if let Some(slot) = self.owned.slot(shard) {
                    prop_assert_eq!(slot.state.lock().running, live, "running of {}", index);
                } else {
                    prop_assert!(self.owned.token(shard).is_none());
                }
                let ready = self.owned.drained(shard).now_or_never().is_some();
                prop_assert_eq!(
                    ready,
                    live == 0,
                    "drained of {} with {} claims",
                    index,
                    live
                );
            }
            for taken in &self.taken {
                let index = taken.claim.shard.index();
                let cancelled = self
                    .cancelled
                    .get(&index)
                    .is_some_and(|c| c.contains(&taken.ownership));
                prop_assert_eq!(
                    taken.claim.cancel.is_cancelled(),
                    cancelled,
                    "the cancel token of a claim of {} in ownership {}",
                    index,
                    taken.ownership
                );
            }
            self.check_waiters()
        }

        /// A waiter is ready exactly when its shard has no claim running,
        /// and one left pending is woken by the end of the last claim.
        fn check_waiters(&mut self) -> Result<(), TestCaseError> {
            let mut waiters = std::mem::take(&mut self.waiters);
            let mut failed = None;
            waiters.retain_mut(|waiter| {
                let live = self.live(waiter.shard);
                if waiter.polled && live == 0 && !waiter.woken() {
                    failed = Some(format!(
                        "a waiter for {} not woken by the drain",
                        waiter.shard
                    ));
                }
                let ready = waiter.poll().is_ready();
                if ready != (live == 0) {
                    failed = Some(format!(
                        "a waiter for {} ready: {ready}, with {live} claims",
                        waiter.shard
                    ));
                }
                !ready
            });
            self.waiters = waiters;
            match failed {
                Some(message) => Err(TestCaseError::fail(message)),
                None => Ok(()),
            }
        }
    }

    proptest! {
        #[test]
        fn claims_follow_ownership_and_drained_follows_the_claims_running(
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let owned = Arc::new(Slots::new(ShardCount::new(SHARDS).unwrap()));
            let mut run = Run::new(&owned);
            for op in &ops {
                run.apply(op)?;
                run.check()?;
            }
            drop(run);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_shard_drains_only_once_its_last_claim_ends() {
        let owned = Arc::new(Slots::new(ShardCount::new(4).unwrap()));
        let shard = owned.count().shard(1).unwrap();
        assert!(owned.claim(shard).is_none(), "not owned yet");
        owned.gain(shard, FencingToken::new(7));
        let claim = owned.claim(shard).expect("owned");
        assert_eq!(claim.token, FencingToken::new(7));
        let (token, cancel) = owned.lose(shard).expect("was owned");
        assert_eq!(token, FencingToken::new(7));
        assert!(owned.claim(shard).is_none(), "no claim after the loss");
        let drained = tokio::time::timeout(std::time::Duration::from_secs(1), owned.drained(shard));
        assert!(drained.await.is_err(), "drained with a claim running");
        cancel.cancel();
        assert!(claim.cancel.is_cancelled());
        drop(claim);
        tokio::time::timeout(std::time::Duration::from_secs(1), owned.drained(shard))
            .await
            .expect("drained once the claim ended");
        owned.gain(shard, FencingToken::new(9));
        assert!(
            !owned.claim(shard).unwrap().cancel.is_cancelled(),
            "a fresh cancel token"
        );
    }

    #[test]
    fn a_late_cancel_of_a_handover_spares_the_next_ownerships_claims() {
        let owned = Arc::new(Slots::new(ShardCount::new(1).unwrap()));
        let shard = owned.count().shard(0).unwrap();
        owned.gain(shard, FencingToken::new(1));
        let (_, handover) = owned.lose(shard).expect("was owned");
        owned.gain(shard, FencingToken::new(1));
        let claim = owned.claim(shard).expect("owned again");
        handover.cancel();
        assert!(
            !claim.cancel.is_cancelled(),
            "cancelled by the handover of the ownership before"
        );
        let (_, next) = owned.lose(shard).expect("owned");
        next.cancel();
        assert!(claim.cancel.is_cancelled(), "cancelled by its own handover");
    }
}
