//! [`Sharding`]: watch the members, compute the assignment, acquire the
//! shards assigned here, drain and release the ones moving away.
//!
//! One task ([`Sharding::run`]) owns the loop. It changes the replica's
//! `Slots` table, which the sharded controllers' [`Ownership`]s read: a
//! shard counts as owned from its acquisition until the moment its handover
//! starts, and is released only once its last reconcile has ended (or the
//! drain bound passed and the reconciles were cancelled: their writes are
//! fenced by then anyway, once the shard is released).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PlacementError;
use super::follower::Follower;
use super::kept::{KeepNoneOnDrop, Kept};
use crate::client::FencingToken;
use crate::controller::{LoseAllOnDrop, Ownership, Slots};
use crate::informer::CacheScope;
use crate::shard::{
    Assignment, MemberId, Membership, MembershipError, Shard, ShardCount, ShardKey,
};

/// How long a stopping sharding waits for its membership to leave.
pub(super) const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an acquisition waits after a backend failure before trying again.
pub(super) const RETRY_ACQUIRE: Duration = Duration::from_secs(1);

/// Told of a sharding's ownership as it changes (the manager's metrics).
/// Every method has an empty default.
pub trait ShardingObserver: Send + Sync + 'static {
    /// The replica owns `owned` shards of `group` now.
    fn owned(&self, group: &str, owned: usize) {
        let _ = (group, owned);
    }

    /// A shard of `group` was acquired, `waited` after it was assigned here.
    fn acquired(&self, group: &str, waited: Duration) {
        let _ = (group, waited);
    }

    /// A shard of `group` started its handover.
    fn handed_over(&self, group: &str) {
        let _ = group;
    }
}

struct NoObserver;

impl ShardingObserver for NoObserver {}

/// One replica's share of a sharded key space: follows a [`Membership`],
/// acquires the shards the [`Assignment`] gives it and hands over those it
/// loses, and gives its controllers an [`Ownership`] of the keys of the
/// shards it owns. A cheap handle: clones share one table.
///
/// Run it with [`run`](Self::run) beside the controllers it places (the
/// [`Manager`](crate::manager::Manager) does, with
/// [`ManagerBuilder::sharding`](crate::manager::ManagerBuilder::sharding)).
/// See [`Environment`](crate::controller::Environment) for an example
/// without a manager.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::CancellationToken;
/// use tend::memory::MemoryMembershipGroup;
/// use tend::placement::Sharding;
/// use tend::shard::ShardCount;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(4)?;
/// let group = MemoryMembershipGroup::new("workers", shards);
/// let sharding = Sharding::new(group.member("replica-0"), shards);
/// let stop = CancellationToken::new();
/// let running = tokio::spawn(sharding.clone().run(stop.clone()));
/// let alone = async { // the only member: every shard is assigned here
///     while sharding.report().owned.len() < 4 {
///         tokio::task::yield_now().await;
///     }
/// };
/// tokio::time::timeout(Duration::from_secs(10), alone).await?;
/// assert_eq!(sharding.report().members, ["replica-0"]);
/// // Sharded controllers run with `sharding.ownership()` meanwhile.
///
/// stop.cancel(); // hands every shard over, then leaves
/// running.await??;
/// assert!(!sharding.owns_any() && group.owner(shards.shard(0).unwrap()).is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) membership: Arc<dyn Membership>,
    pub(super) owned: Arc<Slots>,
    /// The shards the scoped caches keep.
    pub(super) kept: Kept,
    /// How long a handover waits for the shard's reconciles before
    /// cancelling them.
    pub(super) drain: Mutex<Duration>,
    pub(super) observer: Mutex<Arc<dyn ShardingObserver>>,
    /// The last assignment computed, for `/debug/shards` and `/readyz`.
    pub(super) assignment: Mutex<Option<Assignment>>,
    /// When the replica joined (the start of `waited_enough`).
    pub(super) joined: Mutex<Option<Instant>>,
    pub(super) running: AtomicBool,
}

impl Sharding {
    /// `membership`'s member, its keys spread over `shards` shards (the
    /// membership's count: every replica must use the same). Handovers
    /// wait 10 s for running reconciles by default.
    pub fn new(membership: impl Membership, shards: ShardCount) -> Self {
        Self::from_arc(Arc::new(membership), shards)
    }

    /// [`new`](Self::new) with a shared membership.
    #[must_use]
    pub fn from_arc(membership: Arc<dyn Membership>, shards: ShardCount) -> Self {
        Self {
            inner: Arc::new(Inner {
                membership,
                owned: Arc::new(Slots::new(shards)),
                kept: Kept::new(shards),
                drain: Mutex::new(Duration::from_secs(10)),
                observer: Mutex::new(Arc::new(NoObserver)),
                assignment: Mutex::new(None),
                joined: Mutex::new(None),
                running: AtomicBool::new(false),
            }),
        }
    }

    /// How long a shard being handed over waits for its running reconciles
    /// before cancelling them (default 10 s; zero cancels them at once).
    #[must_use]
    pub fn handover_timeout(self, timeout: Duration) -> Self {
        *self.inner.drain.lock() = timeout;
        self
    }

    /// Tells `observer` of the ownership as it changes.
    #[must_use]
    pub fn observer(self, observer: Arc<dyn ShardingObserver>) -> Self {
        *self.inner.observer.lock() = observer;
        self
    }

    /// The keys of the shards this replica owns, for a controller's
    /// [`Environment`](crate::controller::Environment): a key of another
    /// shard is not queued, and is skipped if it was; each reconcile runs
    /// with its key's shard's token.
    #[must_use]
    pub fn ownership<K: ShardKey>(&self) -> Ownership<K> {
        Ownership::sharded(Arc::clone(&self.inner.owned))
    }

    /// The keys of the shards this replica keeps, for an informer's
    /// [`InformerBuilder::scope`](crate::InformerBuilder::scope): its cache
    /// then holds only the objects of the shards assigned to this replica,
    /// owned, or being handed over, and a shard is gained only once every
    /// such informer has listed its objects (a gained key is never
    /// reconciled against a cache that lacks it). Without a scope, every
    /// replica caches every key.
    ///
    /// Give it to the informers of the sharded controllers' primary
    /// sources only (a secondary's keys are not the primary's), and read
    /// no other key of such a cache in a reconcile: it is not there. Run
    /// every informer built with it: one that never lists holds back every
    /// gain.
    ///
    /// # Examples
    ///
    /// A manager's sharded controller over a scoped informer:
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// # use tend::controller::{Action, Context, Reconciler};
    /// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
    /// # tend::impl_object!(Item, key: name: String, version: version);
    /// # struct Reconcile;
    /// # impl Reconciler<Item> for Reconcile {
    /// #     type Error = Infallible;
    /// #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> { Ok(Action::Done) }
    /// # }
    /// use tend::Informer;
    /// use tend::manager::Manager;
    /// use tend::memory::{MemoryMembershipGroup, MemoryStore};
    /// use tend::shard::ShardCount;
    ///
    /// let shards = ShardCount::new(64)?;
    /// let group = MemoryMembershipGroup::new("items", shards);
    /// let store = MemoryStore::<Item>::new("items");
    /// let mut manager = Manager::builder()
    ///     .sharding(group.member("replica-1"), shards)
    ///     .without_signals()
    ///     .build()?;
    /// let scope = manager.sharding().expect("built with a membership").cache_scope();
    /// let items = manager.informer("items", || Informer::builder(store.clone()).scope(scope).build())?;
    /// let controller = manager.controller("items", &items, Reconcile).build()?;
    /// manager.add_sharded_controller(controller)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn cache_scope<K: ShardKey>(&self) -> CacheScope<K> {
        self.inner.kept.scope()
    }

    /// The group's name.
    #[must_use]
    pub fn group(&self) -> &str {
        self.inner.membership.group()
    }

    /// This replica's member id.
    #[must_use]
    pub fn member(&self) -> &MemberId {
        self.inner.membership.id()
    }

    /// The number of shards keys map to.
    #[must_use]
    pub fn shards(&self) -> ShardCount {
        self.inner.owned.count()
    }

    /// Whether this replica owns any shard now.
    #[must_use]
    pub fn owns_any(&self) -> bool {
        !self.inner.owned.owned().is_empty()
    }

    /// The handover bound.
    pub(crate) fn drain(&self) -> Duration {
        *self.inner.drain.lock()
    }

    /// Joins the group, then follows its members until `stop`: acquires
    /// the shards assigned here (each gained shard's keys are queued by the
    /// sharded controllers), hands over the ones assigned away. On `stop`
    /// every shard is handed over (no reconcile of it starts; running ones
    /// get the handover timeout, then are cancelled) and released, and the
    /// member leaves the group (bounded by 5 s).
    ///
    /// # Errors
    ///
    /// [`PlacementError::LostMembership`] when the membership ends (every
    /// reconcile of its shards is cancelled at once: the process should
    /// exit); [`PlacementError::Membership`] when joining fails or the
    /// membership refuses a call; [`PlacementError::Membership`] with
    /// [`MembershipError::Backend`] also when another `run` of this
    /// sharding is going on.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels every sharded reconcile at once and
    /// aborts the acquisitions and handovers without releasing: the shards
    /// are freed when the membership ends.
    pub async fn run(self, stop: CancellationToken) -> Result<(), PlacementError> {
        if self.inner.running.swap(true, Ordering::AcqRel) {
            return Err(PlacementError::Membership(MembershipError::Backend {
                group: self.group().to_owned(),
                source: "this sharding is running already".into(),
            }));
        }
        let _running = Running(&self.inner.running);
        // Dropped in reverse: nothing owned any more, then nothing kept.
        let _kept = KeepNoneOnDrop(&self.inner.kept);
        let _owned = LoseAllOnDrop(Arc::clone(&self.inner.owned));
        let membership = Arc::clone(&self.inner.membership);
        tokio::select! {
            joined = membership.join() => joined.map_err(PlacementError::Membership)?,
            () = stop.cancelled() => return Ok(()),
        }
        *self.inner.joined.lock() = Some(Instant::now());
        tracing::info!(group = self.group(), member = %membership.id(), "joined");
        // On every end, `_owned` leaves no shard owned here.
        Follower::new(Arc::clone(&self.inner)).run(stop).await
    }

    /// The shards assigned to this replica that it does not own yet
    /// (`None` before the first assignment).
    pub(crate) fn missing(&self) -> Option<usize> {
        let assignment = self.inner.assignment.lock().clone()?;
        let me = self.member().as_str();
        let missing = assignment
            .shards_of(me)
            .filter(|&shard| self.inner.owned.token(shard).is_none())
            .count();
        Some(missing)
    }

    /// Whether `/readyz` has waited long enough for the assigned share:
    /// three handover bounds since joining (an old owner drains for at most
    /// two, then releases).
    pub(crate) fn waited_enough(&self) -> bool {
        let bound = self.drain().saturating_mul(3);
        self.inner
            .joined
            .lock()
            .is_some_and(|joined| joined.elapsed() >= bound)
    }

    /// What `/debug/shards` shows: the members this replica sees, the
    /// assignment and the shards it owns with their tokens.
    #[must_use]
    pub fn report(&self) -> ShardReport {
        let assignment = self.inner.assignment.lock().clone();
        let me = self.member().to_string();
        let owned = &self.inner.owned;
        ShardReport {
            group: self.group().to_owned(),
            member: me.clone(),
            shards: owned.count().get(),
            members: self
                .inner
                .membership
                .members()
                .borrow()
                .iter()
                .map(ToString::to_string)
                .collect(),
            assigned: assignment
                .as_ref()
                .map(|a| a.shards_of(&me).map(Shard::index).collect())
                .unwrap_or_default(),
            owned: owned
                .owned()
                .into_iter()
                .map(|(shard, token)| OwnedShard {
                    shard: shard.index(),
                    token,
                })
                .collect(),
        }
    }
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("group", &self.group())
            .field("member", self.member())
            .field("shards", &self.shards().get())
            .field("owned", &self.inner.owned.owned().len())
            .finish_non_exhaustive()
    }
}

/// Clears the running flag when a run ends, however it ends.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A [`Sharding`] as this replica sees it: `/debug/shards`'s answer.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ShardReport {
    /// The group's name.
    pub group: String,
    /// This replica's member id.
    pub member: String,
    /// The number of shards.
    pub shards: u32,
    /// The members this replica sees, sorted.
    pub members: Vec<String>,
    /// The shards the last assignment gives this replica.
    pub assigned: Vec<u32>,
    /// The shards this replica owns, with their tokens.
    pub owned: Vec<OwnedShard>,
}

/// One shard owned, with its fencing token.
#[derive(Debug, Clone, Copy, Serialize)]
#[non_exhaustive]
pub struct OwnedShard {
    /// The shard's index.
    pub shard: u32,
    /// Its fencing token.
    pub token: FencingToken,
}
