//! The manager's sharding: watch the members, compute the assignment,
//! acquire the shards assigned here, drain and release the ones moving
//! away.
//!
//! One task (in the election layer) owns the loop. It changes the
//! replica's [`Owned`] table, which the sharded controllers read: a shard
//! counts as owned from its acquisition until the moment its handover
//! starts, and is released only once its last reconcile has ended (or the
//! drain bound passed and the reconciles were cancelled: their writes are
//! fenced by then anyway, once the shard is released).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::erased::QueueView;
use super::group::Exit;
use super::metrics::Metrics;
use crate::controller::{Owned, ShardFeed};
use crate::shard::{Assignment, MemberId, Membership, MembershipError, Shard, ShardCount};

/// How long a stopping manager waits for its membership to leave.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an acquisition waits after a backend failure before trying again.
const RETRY_ACQUIRE: Duration = Duration::from_secs(1);

/// The sharding configured on a manager, shared by its task and the status.
pub(super) struct Sharding {
    pub(super) membership: Arc<dyn Membership>,
    pub(super) owned: Arc<Owned>,
    /// How long a handover waits for the shard's reconciles before
    /// cancelling them.
    pub(super) drain: Duration,
    /// The last assignment computed, for `/debug/shards` and `/readyz`.
    pub(super) assignment: Mutex<Option<Assignment>>,
    /// When the replica joined (the start of `ready_after`).
    pub(super) joined: Mutex<Option<Instant>>,
}

impl Sharding {
    pub(super) fn new(
        membership: Arc<dyn Membership>,
        shards: ShardCount,
        drain: Duration,
    ) -> Self {
        Self {
            membership,
            owned: Arc::new(Owned::new(shards)),
            drain,
            assignment: Mutex::new(None),
            joined: Mutex::new(None),
        }
    }

    pub(super) fn group(&self) -> &str {
        self.membership.group()
    }

    /// The shards assigned to this replica that it does not own yet
    /// (`None` before the first assignment).
    pub(super) fn missing(&self) -> Option<usize> {
        let assignment = self.assignment.lock().clone()?;
        let me = self.membership.id().as_str();
        let missing = assignment
            .shards_of(me)
            .filter(|&shard| self.owned.token(shard).is_none())
            .count();
        Some(missing)
    }

    /// Whether `/readyz` has waited long enough for the assigned share:
    /// three handover bounds since joining (an old owner drains for at most
    /// two, then releases).
    pub(super) fn waited_enough(&self) -> bool {
        let bound = self.drain.saturating_mul(3);
        self.joined
            .lock()
            .is_some_and(|joined| joined.elapsed() >= bound)
    }

    /// `/debug/shards`: the members this replica sees, the assignment and
    /// the shards it owns.
    pub(super) fn report(&self) -> ShardReport {
        let assignment = self.assignment.lock().clone();
        let me = self.membership.id().to_string();
        ShardReport {
            group: self.group().to_owned(),
            member: me.clone(),
            shards: self.owned.count().get(),
            members: self
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
            owned: self
                .owned
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

/// `/debug/shards`'s answer.
#[derive(Debug, Serialize)]
pub(super) struct ShardReport {
    group: String,
    member: String,
    shards: u32,
    members: Vec<String>,
    assigned: Vec<u32>,
    owned: Vec<OwnedShard>,
}

#[derive(Debug, Serialize)]
struct OwnedShard {
    shard: u32,
    token: u64,
}

/// One acquisition's end: its shard, its number, when the shard was
/// assigned here (kept across retries) and what it returned.
struct Acquired {
    shard: Shard,
    number: u64,
    assigned: Instant,
    result: Result<u64, MembershipError>,
}

/// The sharding task's state: what it is acquiring and draining.
pub(super) struct Ownership {
    pub(super) sharding: Arc<Sharding>,
    pub(super) feeds: Vec<ShardFeed>,
    pub(super) queues: Vec<Arc<dyn QueueView>>,
    pub(super) abort: CancellationToken,
    pub(super) metrics: Metrics,
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
    retired: HashMap<Shard, u64>,
}

impl Ownership {
    pub(super) fn new(
        sharding: Arc<Sharding>,
        feeds: Vec<ShardFeed>,
        queues: Vec<Arc<dyn QueueView>>,
        abort: CancellationToken,
        metrics: Metrics,
    ) -> Self {
        Self {
            sharding,
            feeds,
            queues,
            abort,
            metrics,
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
    pub(super) async fn run(mut self, cancel: CancellationToken) -> Exit {
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
    ) -> Exit {
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
                self.metrics
                    .shard_acquired(membership.group(), assigned.elapsed());
                tracing::info!(group = membership.group(), %shard, token, "acquired a shard");
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
            Err(error) => return Err(ManagerError::Membership(error)),
        }
        Ok(())
    }

    /// Releases `token` of `shard`, which this replica is not to keep.
    async fn give_back(&mut self, shard: Shard, token: u64) {
        if release(&*self.sharding.membership, shard, token).await {
            self.retired.insert(shard, token);
        }
    }

    /// Queues the cached keys of the shards just gained, in every
    /// controller (after `gain`: an event in between is queued by the
    /// filter, one before it is in the cache already).
    fn gained(&self, gained: &[Shard]) {
        if gained.is_empty() {
            return;
        }
        for feed in &self.feeds {
            feed(gained);
        }
        self.report_owned();
    }

    /// Stops new reconciles of `shard`, then (in a task) drains the running
    /// ones within the bound, cancels what is left, and releases it.
    fn hand_over(&mut self, shard: Shard) {
        let Some((token, cancel)) = self.sharding.owned.lose(shard) else {
            return;
        };
        self.report_owned();
        self.metrics.shard_handed_over(self.sharding.group());
        let sharding = Arc::clone(&self.sharding);
        self.draining.insert(shard);
        self.retired.insert(shard, token);
        self.drained.spawn(async move {
            let owned = &sharding.owned;
            if tokio::time::timeout(sharding.drain, owned.drained(shard))
                .await
                .is_err()
            {
                tracing::warn!(group = sharding.group(), %shard, bound = ?sharding.drain, "reconciles still running at the handover's bound, cancelling them");
                cancel.cancel();
                // Cancelled reconciles end at their next `.await`; one that
                // blocks its thread cannot be waited for, and its writes are
                // fenced once the shard is released.
                let _ = tokio::time::timeout(sharding.drain, owned.drained(shard)).await;
            }
            let released = release(&*sharding.membership, shard, token).await;
            (shard, released)
        });
    }

    fn report_owned(&self) {
        let owned = self.sharding.owned.owned().len();
        self.metrics.set_shards_owned(self.sharding.group(), owned);
    }

    /// The membership ended: no reconcile may start, running ones are
    /// cancelled at once (another replica may own their shards already).
    fn lost(&mut self) -> ManagerError {
        let group = self.sharding.group().to_owned();
        tracing::error!(group = %group, "lost the membership, cancelling reconciles");
        for queue in &self.queues {
            queue.shutdown();
        }
        self.abort.cancel();
        self.clear();
        ManagerError::LostMembership { group }
    }

    fn clear(&mut self) {
        for (shard, _) in self.sharding.owned.owned() {
            self.sharding.owned.lose(shard);
        }
        for (_, handle) in self.acquiring.values() {
            handle.abort();
        }
        self.acquiring.clear();
        self.report_owned();
    }

    /// A clean stop (the controllers have stopped): gives every shard up
    /// and leaves the group, bounded.
    async fn leave(mut self) -> Exit {
        self.clear();
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
async fn release(membership: &dyn Membership, shard: Shard, token: u64) -> bool {
    match membership.release(shard, token).await {
        Ok(()) => {
            tracing::info!(group = membership.group(), %shard, token, "released a shard");
            true
        }
        // Freed when the membership ends instead.
        Err(error) => {
            tracing::warn!(group = membership.group(), %shard, %error, "releasing a shard failed");
            false
        }
    }
}
