//! The slot table against a model, on random sequences of gains, losses,
//! claims, drops and cancels.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::task::ArcWake;
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::client::FencingToken;

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
