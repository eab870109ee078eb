//! `Follower`: the sharding task's state machine: the acquisitions of the
//! shards assigned here, the drains and releases of the shards moving away.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PlacementError;
use super::sharding::{Inner, LEAVE_TIMEOUT, RETRY_ACQUIRE, ShardingObserver};
use crate::client::FencingToken;
use crate::shard::{Assignment, MemberId, Membership, MembershipError, Shard};

/// One acquisition's end: its shard, its number, when the shard was
/// assigned here (kept across retries) and what it returned.
struct Acquired {
    shard: Shard,
    number: u64,
    assigned: Instant,
    result: Result<FencingToken, MembershipError>,
}

/// A shard acquired whose objects the scoped caches were filling.
#[derive(Debug, Clone, Copy)]
struct Filled {
    shard: Shard,
    token: FencingToken,
    assigned: Instant,
}

/// The sharding task's state: what it is acquiring, filling and draining.
pub(super) struct Follower {
    sharding: Arc<Inner>,
    /// The acquisition running per shard, by its number.
    acquiring: HashMap<Shard, (u64, AbortHandle)>,
    acquired: JoinSet<Acquired>,
    /// The next acquisition's number.
    next: u64,
    /// Shards acquired, not yet gained: the scoped caches are fetching
    /// their objects (a gained key is never reconciled against a cache
    /// that lacks it).
    filling: HashMap<Shard, (FencingToken, AbortHandle)>,
    filled: JoinSet<Filled>,
    draining: HashSet<Shard>,
    /// Whether each drained shard's release succeeded.
    drained: JoinSet<(Shard, bool)>,
    /// Per shard, the last token handed over or given back: a late result
    /// of an acquisition with it (or an older one) is stale.
    retired: HashMap<Shard, FencingToken>,
}

impl Follower {
    pub(super) fn new(sharding: Arc<Inner>) -> Self {
        Self {
            sharding,
            acquiring: HashMap::new(),
            acquired: JoinSet::new(),
            next: 0,
            filling: HashMap::new(),
            filled: JoinSet::new(),
            draining: HashSet::new(),
            drained: JoinSet::new(),
            retired: HashMap::new(),
        }
    }

    /// Follows the membership until `cancel` (then leaves the group) or
    /// until the membership is lost (then stops every reconcile).
    pub(super) async fn run(mut self, cancel: CancellationToken) -> Result<(), PlacementError> {
        let membership = Arc::clone(&self.sharding.membership);
        let mut members = membership.members();
        let mut mine = self.assign(&mut members);
        loop {
            self.follow(&mine);
            self.keep(&mine);
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
                Some(done) = self.filled.join_next() => {
                    let mut gained = Vec::new();
                    let mut next = Some(done);
                    while let Some(done) = next.take() {
                        if let Ok(filled) = done {
                            self.filled_one(filled, &mine, &mut gained);
                        }
                        next = self.filled.try_join_next();
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
        let moved: Vec<Shard> = (self.filling.keys())
            .filter(|shard| !mine.contains(shard))
            .copied()
            .collect();
        for shard in moved {
            if let Some((token, handle)) = self.filling.remove(&shard) {
                handle.abort();
                self.release_unowned(shard, token);
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
            let busy = self.acquiring.contains_key(&shard)
                || self.filling.contains_key(&shard)
                || self.draining.contains(&shard);
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
            // Gained (or being filled) already, from another result.
            Ok(token)
                if owned == Some(token)
                    || self.filling.get(&shard).is_some_and(|(t, _)| *t == token) => {}
            // Another token while one is owned, filled or drained: not to keep.
            Ok(token)
                if owned.is_some()
                    || self.filling.contains_key(&shard)
                    || self.draining.contains(&shard) =>
            {
                self.give_back(shard, token).await;
            }
            Ok(token) if mine.contains(&shard) && self.sharding.kept.scoped() => {
                self.fill(shard, token, assigned);
            }
            Ok(token) if mine.contains(&shard) => self.gain(shard, token, assigned, gained),
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

    /// Gains `shard` with `token`: its keys may be reconciled.
    fn gain(&self, shard: Shard, token: FencingToken, assigned: Instant, gained: &mut Vec<Shard>) {
        self.sharding.owned.gain(shard, token);
        let group = self.group();
        self.observer().acquired(group, assigned.elapsed());
        tracing::info!(group, %shard, %token, "acquired a shard");
        gained.push(shard);
    }

    /// Gains `shard` once the scoped caches hold its objects (kept since
    /// it was assigned here, so a list is most often under way).
    fn fill(&mut self, shard: Shard, token: FencingToken, assigned: Instant) {
        let sharding = Arc::clone(&self.sharding);
        let generation = sharding.kept.generation();
        let handle = self.filled.spawn(async move {
            sharding.kept.filled(generation).await;
            Filled {
                shard,
                token,
                assigned,
            }
        });
        self.filling.insert(shard, (token, handle));
    }

    /// A shard's objects are cached: gained (into `gained`) if still
    /// assigned here, else released.
    fn filled_one(&mut self, filled: Filled, mine: &HashSet<Shard>, gained: &mut Vec<Shard>) {
        let Filled {
            shard,
            token,
            assigned,
        } = filled;
        if self.filling.get(&shard).is_none_or(|(t, _)| *t != token) {
            return;
        }
        self.filling.remove(&shard);
        if mine.contains(&shard) && self.sharding.owned.token(shard).is_none() {
            self.gain(shard, token, assigned, gained);
        } else {
            self.release_unowned(shard, token);
        }
    }

    /// Releases `shard`, acquired but never gained (nothing to drain), in
    /// a task, as a handover does: a filling that may never end (an
    /// informer that does not list) must not hold a shard moved away.
    fn release_unowned(&mut self, shard: Shard, token: FencingToken) {
        self.release_after(shard, token, async {});
    }

    /// Releases `token` of `shard` in a task, once `before` (a drain) ends;
    /// the shard is draining until then, its token retired.
    fn release_after(
        &mut self,
        shard: Shard,
        token: FencingToken,
        before: impl Future<Output = ()> + Send + 'static,
    ) {
        let sharding = Arc::clone(&self.sharding);
        self.draining.insert(shard);
        self.retired.insert(shard, token);
        self.drained.spawn(async move {
            before.await;
            let released = release(&*sharding.membership, shard, token).await;
            (shard, released)
        });
    }

    /// Has the scoped caches keep the shards assigned, owned, being filled
    /// or drained here.
    fn keep(&self, mine: &HashSet<Shard>) {
        let owned = self
            .sharding
            .owned
            .owned()
            .into_iter()
            .map(|(shard, _)| shard);
        let mut kept: HashSet<Shard> = mine.iter().copied().chain(owned).collect();
        kept.extend(self.filling.keys().copied());
        kept.extend(self.draining.iter().copied());
        self.sharding.kept.set(&kept);
    }

    /// Releases `token` of `shard`, which this replica is not to keep;
    /// bounded, so that a hanging backend does not stop the loop (the
    /// shard is freed when the membership ends then).
    async fn give_back(&mut self, shard: Shard, token: FencingToken) {
        if release(&*self.sharding.membership, shard, token).await {
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
        let drained = async move {
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
        };
        self.release_after(shard, token, drained);
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
        self.filled.abort_all();
        self.filling.clear();
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
        self.filled.abort_all();
        for (shard, (token, _)) in std::mem::take(&mut self.filling) {
            self.release_unowned(shard, token);
        }
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

/// Whether the release succeeded, within `LEAVE_TIMEOUT`: a membership
/// that hangs must not keep a shard draining (kept, never acquired again).
async fn release(membership: &dyn Membership, shard: Shard, token: FencingToken) -> bool {
    let released = tokio::time::timeout(LEAVE_TIMEOUT, membership.release(shard, token));
    let Ok(released) = released.await else {
        tracing::warn!(group = membership.group(), %shard, timeout = ?LEAVE_TIMEOUT, "releasing a shard timed out");
        return false;
    };
    match released {
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
