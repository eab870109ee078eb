//! [`Sharding`]: watch the members, compute the assignment, acquire the
//! shards assigned here, drain and release the ones moving away.
//!
//! One task ([`Sharding::run`]) owns the loop. It changes the replica's
//! `Slots` table, which the sharded controllers' [`Ownership`]s read: a
//! shard counts as owned from its acquisition until the moment its handover
//! starts, and is released only once its last reconcile has ended (or the
//! drain bound passed and the reconciles were cancelled: their writes are
//! fenced by then anyway, once the shard is released).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PlacementError;
use crate::client::FencingToken;
use crate::controller::{LoseAllOnDrop, Ownership, Slots};
use crate::shard::{
    Assignment, MemberId, Membership, MembershipError, Shard, ShardCount, ShardKey,
};

/// How long a stopping sharding waits for its membership to leave.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an acquisition waits after a backend failure before trying again.
const RETRY_ACQUIRE: Duration = Duration::from_secs(1);

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
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

struct Inner {
    membership: Arc<dyn Membership>,
    owned: Arc<Slots>,
    /// How long a handover waits for the shard's reconciles before
    /// cancelling them.
    drain: Mutex<Duration>,
    observer: Mutex<Arc<dyn ShardingObserver>>,
    /// The last assignment computed, for `/debug/shards` and `/readyz`.
    assignment: Mutex<Option<Assignment>>,
    /// When the replica joined (the start of `waited_enough`).
    joined: Mutex<Option<Instant>>,
    running: AtomicBool,
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

/// One acquisition's end: its shard, its number, when the shard was
/// assigned here (kept across retries) and what it returned.
struct Acquired {
    shard: Shard,
    number: u64,
    assigned: Instant,
    result: Result<FencingToken, MembershipError>,
}

/// The sharding task's state: what it is acquiring and draining.
struct Follower {
    sharding: Arc<Inner>,
    /// The acquisition running per shard, by its number.
    acquiring: HashMap<Shard, (u64, AbortHandle)>,
    acquired: JoinSet<Acquired>,
    /// The next acquisition's number.
    next: u64,
    draining: HashSet<Shard>,
    /// Whether each drained shard's release succeeded.
    drained: JoinSet<(Shard, bool)>,
    /// Per shard, the last token handed over or given back: a late result
    /// of an acquisition with it (or an older one) is stale.
    retired: HashMap<Shard, FencingToken>,
}

impl Follower {
    fn new(sharding: Arc<Inner>) -> Self {
        Self {
            sharding,
            acquiring: HashMap::new(),
            acquired: JoinSet::new(),
            next: 0,
            draining: HashSet::new(),
            drained: JoinSet::new(),
            retired: HashMap::new(),
        }
    }

    /// Follows the membership until `cancel` (then leaves the group) or
    /// until the membership is lost (then stops every reconcile).
    async fn run(mut self, cancel: CancellationToken) -> Result<(), PlacementError> {
        let membership = Arc::clone(&self.sharding.membership);
        let mut members = membership.members();
        let mut mine = self.assign(&mut members);
        loop {
            self.follow(&mine);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return self.leave().await,
                () = membership.lost() => return Err(self.lost()),
                changed = members.changed() => {
                    if changed.is_err() {
                        return Err(self.lost());
                    }
                    mine = self.assign(&mut members);
                }
                Some(done) = self.acquired.join_next() => {
                    let mut gained = Vec::new();
                    let mut next = Some(done);
                    while let Some(done) = next.take() {
                        if let Ok(acquired) = done {
                            self.acquired_one(acquired, &mine, &mut gained).await?;
                        }
                        next = self.acquired.try_join_next();
                    }
                    self.gained(&gained);
                }
                Some(drained) = self.drained.join_next() => {
                    if let Ok((shard, released)) = drained {
                        self.draining.remove(&shard);
                        if !released {
                            // Its record may still be this member's: a later
                            // acquisition can return the same token.
                            self.retired.remove(&shard);
                        }
                    }
                }
            }
        }
    }

    /// The assignment of the members seen now (computed only when they
    /// change: it costs a weight per shard and member); this replica's
    /// shards in it.
    fn assign(&self, members: &mut watch::Receiver<Vec<MemberId>>) -> HashSet<Shard> {
        let assignment = Assignment::compute(
            members.borrow_and_update().clone(),
            self.sharding.owned.count(),
        );
        let id = self.sharding.membership.id().as_str();
        let mine = assignment.shards_of(id).collect();
        *self.sharding.assignment.lock() = Some(assignment);
        mine
    }

    /// Starts handovers of owned shards not assigned here, acquisitions of
    /// assigned ones not owned, and stops acquisitions no longer assigned.
    fn follow(&mut self, mine: &HashSet<Shard>) {
        let owned = Arc::clone(&self.sharding.owned);
        for (shard, _) in owned.owned() {
            if !mine.contains(&shard) {
                self.hand_over(shard);
            }
        }
        self.acquiring.retain(|shard, (_, handle)| {
            let keep = mine.contains(shard);
            if !keep {
                handle.abort();
            }
            keep
        });
        for &shard in mine {
            let busy = self.acquiring.contains_key(&shard) || self.draining.contains(&shard);
            if !busy && owned.token(shard).is_none() {
                self.acquire(shard, Duration::ZERO, Instant::now());
            }
        }
    }

    fn acquire(&mut self, shard: Shard, after: Duration, assigned: Instant) {
        let membership = Arc::clone(&self.sharding.membership);
        let number = self.next;
        self.next += 1;
        let handle = self.acquired.spawn(async move {
            tokio::time::sleep(after).await;
            Acquired {
                shard,
                number,
                assigned,
                result: membership.acquire(shard).await,
            }
        });
        self.acquiring.insert(shard, (number, handle));
    }

    /// One acquisition's result; a shard acquired and still assigned here
    /// goes into `gained`. A token from an acquisition stopped after it had
    /// ended counts too (the membership hands a later acquisition of the
    /// shard the same token), and leaves the running one in place.
    async fn acquired_one(
        &mut self,
        acquired: Acquired,
        mine: &HashSet<Shard>,
        gained: &mut Vec<Shard>,
    ) -> Result<(), PlacementError> {
        let Acquired {
            shard,
            number,
            assigned,
            result,
        } = acquired;
        match self.acquiring.get(&shard) {
            Some((current, _)) if *current == number => drop(self.acquiring.remove(&shard)),
            // The running acquisition answers for the shard's failures.
            Some(_) if result.is_err() => return Ok(()),
            _ => {}
        }
        let membership = Arc::clone(&self.sharding.membership);
        let owned = self.sharding.owned.token(shard);
        match result {
            // Handed over or given back already (tokens only grow).
            Ok(token) if self.retired.get(&shard).is_some_and(|&r| token <= r) => {}
            // Gained already, from another acquisition's result.
            Ok(token) if owned == Some(token) => {}
            // Another token while one is owned or drained: not to keep.
            Ok(token) if owned.is_some() || self.draining.contains(&shard) => {
                self.give_back(shard, token).await;
            }
            Ok(token) if mine.contains(&shard) => {
                self.sharding.owned.gain(shard, token);
                self.observer()
                    .acquired(membership.group(), assigned.elapsed());
                tracing::info!(group = membership.group(), %shard, %token, "acquired a shard");
                gained.push(shard);
            }
            // Moved away while waiting: give it back at once.
            Ok(token) => self.give_back(shard, token).await,
            Err(MembershipError::NotJoined { .. }) => return Err(self.lost()),
            Err(MembershipError::Backend { .. }) => {
                if let Err(error) = result {
                    tracing::warn!(group = membership.group(), %shard, %error, "acquiring a shard failed, retrying");
                }
                self.acquire(shard, RETRY_ACQUIRE, assigned);
            }
            Err(error) => return Err(PlacementError::Membership(error)),
        }
        Ok(())
    }

    /// Releases `token` of `shard`, which this replica is not to keep;
    /// bounded, so that a hanging backend does not stop the loop (the
    /// shard is freed when the membership ends then).
    async fn give_back(&mut self, shard: Shard, token: FencingToken) {
        let released = release(&*self.sharding.membership, shard, token);
        if tokio::time::timeout(LEAVE_TIMEOUT, released)
            .await
            .unwrap_or(false)
        {
            self.retired.insert(shard, token);
        }
    }

    /// Has the sharded controllers queue the cached keys of the shards
    /// just gained (after `gain`: an event in between is queued by the
    /// filter, one before it is in the cache already).
    fn gained(&self, gained: &[Shard]) {
        if gained.is_empty() {
            return;
        }
        self.sharding.owned.announce(gained);
        self.report_owned();
    }

    fn observer(&self) -> Arc<dyn ShardingObserver> {
        Arc::clone(&self.sharding.observer.lock())
    }

    fn group(&self) -> &str {
        self.sharding.membership.group()
    }

    /// Stops new reconciles of `shard`, then (in a task) drains the running
    /// ones within the bound, cancels what is left, and releases it.
    fn hand_over(&mut self, shard: Shard) {
        let Some((token, cancel)) = self.sharding.owned.lose(shard) else {
            return;
        };
        self.report_owned();
        self.observer().handed_over(self.group());
        let sharding = Arc::clone(&self.sharding);
        self.draining.insert(shard);
        self.retired.insert(shard, token);
        self.drained.spawn(async move {
            let owned = &sharding.owned;
            let drain = *sharding.drain.lock();
            if tokio::time::timeout(drain, owned.drained(shard))
                .await
                .is_err()
            {
                tracing::warn!(group = sharding.membership.group(), %shard, bound = ?drain, "reconciles still running at the handover's bound, cancelling them");
                cancel.cancel();
                // Cancelled reconciles end at their next `.await`; one that
                // blocks its thread cannot be waited for, and its writes are
                // fenced once the shard is released.
                let _ = tokio::time::timeout(drain, owned.drained(shard)).await;
            }
            let released = release(&*sharding.membership, shard, token).await;
            (shard, released)
        });
    }

    fn report_owned(&self) {
        let owned = self.sharding.owned.owned().len();
        self.observer().owned(self.group(), owned);
    }

    /// The membership ended: no reconcile may start, running ones are
    /// cancelled at once (another replica may own their shards already).
    fn lost(&mut self) -> PlacementError {
        let group = self.group().to_owned();
        tracing::error!(group = %group, "lost the membership, cancelling reconciles");
        self.sharding.owned.lose_all_now();
        self.stop_acquiring();
        self.report_owned();
        PlacementError::LostMembership { group }
    }

    fn stop_acquiring(&mut self) {
        for (_, handle) in self.acquiring.values() {
            handle.abort();
        }
        self.acquiring.clear();
    }

    /// A clean stop: hands every shard over (drained within the bound,
    /// then released) and leaves the group, bounded.
    async fn leave(mut self) -> Result<(), PlacementError> {
        self.stop_acquiring();
        for (shard, _) in self.sharding.owned.owned() {
            self.hand_over(shard);
        }
        self.acquired.shutdown().await;
        while self.drained.join_next().await.is_some() {}
        let membership = &self.sharding.membership;
        match tokio::time::timeout(LEAVE_TIMEOUT, membership.leave()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "leaving the membership failed"),
            Err(_) => tracing::warn!(timeout = ?LEAVE_TIMEOUT, "leaving the membership timed out"),
        }
        Ok(())
    }
}

/// Whether the release succeeded.
async fn release(membership: &dyn Membership, shard: Shard, token: FencingToken) -> bool {
    match membership.release(shard, token).await {
        Ok(()) => {
            tracing::info!(group = membership.group(), %shard, %token, "released a shard");
            true
        }
        // Freed when the membership ends instead.
        Err(error) => {
            tracing::warn!(group = membership.group(), %shard, %error, "releasing a shard failed");
            false
        }
    }
}
