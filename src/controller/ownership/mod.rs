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

use tokio::sync::broadcast;

use crate::shard::{Shard, ShardCount, ShardKey};

mod slots;
#[cfg(test)]
mod tests;

pub(crate) use self::slots::{Claim, LoseAllOnDrop, Slots};

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
///
/// # Examples
///
/// A leader-only controller: its reconciles run while its replica leads,
/// each under the leader's fencing token.
///
/// ```
/// # use std::convert::Infallible;
/// # use std::sync::{Arc, Mutex};
/// # use std::time::Duration;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # use tend::{Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// use tend::client::FencingToken;
/// use tend::memory::{MemoryElectionGroup, MemoryStore};
/// use tend::placement::Leadership;
/// use tend::testing::Harness;
///
/// /// Writes down each reconcile's fencing token.
/// #[derive(Clone, Default)]
/// struct Tokens(Arc<Mutex<Vec<Option<FencingToken>>>>);
/// # impl Reconciler<Light> for Tokens {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Infallible> {
/// #         self.0.lock().unwrap().push(ctx.fencing_token());
/// #         Ok(Action::Done)
/// #     }
/// # }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// let informer = Informer::builder(store).build()?;
/// let (tokens, election) = (Tokens::default(), MemoryElectionGroup::new("lights"));
/// let leadership = Leadership::new(election.candidate());
/// let mut harness = Harness::new();
/// harness.informer(&informer);
/// harness.leadership(&leadership); // campaigns
/// let controller = Controller::builder("lights", &informer, tokens.clone()).build()?;
/// harness.controller_with(controller, leadership.ownership());
/// harness.settle(Duration::from_secs(60)).await?; // won, and reconciled
/// assert_eq!(*tokens.0.lock().unwrap(), [Some(FencingToken::new(1))]);
/// # harness.shutdown().await?;
/// # Ok(()) }
/// ```
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
