//! [`Leadership`]: campaign, own every key while leading, give it up at
//! once when the leadership is lost.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PlacementError;
use crate::client::FencingToken;
use crate::controller::{LoseAllOnDrop, Ownership, Slots};
use crate::election::LeaderElector;
use crate::shard::ShardCount;

/// How long a stopping leadership waits for its elector to resign.
const RESIGN_TIMEOUT: Duration = Duration::from_secs(5);

/// A replica's candidacy in a leader election, and what leader-only
/// runnables read of it: an [`Ownership`] of every key while this replica
/// leads (with the leader's fencing token), and the current
/// [`term`](Self::term). A cheap handle: clones share one candidacy.
///
/// Run it with [`run`](Self::run) (the [`Manager`](crate::manager::Manager)
/// does, with [`ManagerBuilder::leader_election`](crate::manager::ManagerBuilder::leader_election)).
///
/// # Examples
///
/// ```
/// use tend::CancellationToken;
/// use tend::client::FencingToken;
/// use tend::memory::MemoryElectionGroup;
/// use tend::placement::Leadership;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let election = MemoryElectionGroup::new("operator");
/// let leadership = Leadership::new(election.candidate());
/// let stop = CancellationToken::new();
/// let running = tokio::spawn(leadership.clone().run(stop.clone()));
/// leadership.term().wait_for(Option::is_some).await?; // won the campaign
/// assert!(leadership.is_leader());
/// assert_eq!(*leadership.term().borrow(), Some(FencingToken::new(1)));
/// // Leader-only controllers run with `leadership.ownership()` meanwhile.
///
/// stop.cancel(); // steps down and resigns
/// running.await??;
/// assert!(!leadership.is_leader());
/// assert_eq!(election.leader_token(), None);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Inner>,
}

struct Inner {
    elector: Arc<dyn LeaderElector>,
    /// One slot: the leadership.
    owned: Arc<Slots>,
    term: watch::Sender<Option<FencingToken>>,
    /// When the term last changed (or the candidacy was made).
    since: Mutex<Instant>,
    again: AtomicBool,
}

impl Leadership {
    /// A candidacy through `elector`. After a lost leadership,
    /// [`run`](Self::run) fails, unless [`campaign_again`](Self::campaign_again).
    pub fn new(elector: impl LeaderElector) -> Self {
        Self::from_arc(Arc::new(elector))
    }

    /// [`new`](Self::new) with a shared elector.
    #[must_use]
    pub fn from_arc(elector: Arc<dyn LeaderElector>) -> Self {
        let one = ShardCount::new(1).unwrap_or(ShardCount::DEFAULT);
        Self {
            inner: Arc::new(Inner {
                elector,
                owned: Arc::new(Slots::new(one)),
                term: watch::Sender::new(None),
                since: Mutex::new(Instant::now()),
                again: AtomicBool::new(false),
            }),
        }
    }

    /// After a lost leadership, stand by and campaign again instead of
    /// failing `run` (default: fail, so that the process exits). Either
    /// way every leader-only reconcile is cancelled at once when the
    /// leadership is lost; standing by, their keys stay queued and run
    /// again, with the new token, once this replica wins again.
    #[must_use]
    pub fn campaign_again(self, again: bool) -> Self {
        self.inner.again.store(again, Ordering::Release);
        self
    }

    /// Whether a lost leadership is followed by a new campaign.
    #[must_use]
    pub fn campaigns_again(&self) -> bool {
        self.inner.again.load(Ordering::Acquire)
    }

    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.elector.name()
    }

    /// Every key while this replica leads, with the leader's fencing
    /// token; none while it stands by (keys stay queued: a warm standby).
    #[must_use]
    pub fn ownership<K>(&self) -> Ownership<K> {
        Ownership::leader(Arc::clone(&self.inner.owned))
    }

    /// The leader's fencing token while this replica leads, `None` while
    /// it stands by; changes as it wins and loses.
    #[must_use]
    pub fn term(&self) -> watch::Receiver<Option<FencingToken>> {
        self.inner.term.subscribe()
    }

    /// Whether this replica leads now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.inner.term.borrow().is_some()
    }

    /// When this replica began leading, or standing by: when the term last
    /// changed, or (never leading yet) when the candidacy was made.
    #[must_use]
    pub fn since(&self) -> Instant {
        *self.inner.since.lock()
    }

    /// Campaigns, leads until the leadership is lost or `stop`, and on
    /// `stop` gives it up: no leader-only reconcile starts, the running ones
    /// are waited for up to 5 s (their runner normally stops them first),
    /// then cancelled, and the candidacy is resigned (bounded by 5 s), so
    /// that a standby takes over at once. The candidacy is resigned after a
    /// lost leadership too.
    ///
    /// # Errors
    ///
    /// [`PlacementError::LostLeadership`] when the leadership is lost (and
    /// not [`campaign_again`](Self::campaign_again)): every leader-only
    /// reconcile was cancelled at once; [`PlacementError::Election`] when
    /// the elector fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops a pending campaign (withdrawing the
    /// candidacy) and cancels every leader-only reconcile at once, but does
    /// not resign a won leadership (the elector's lease then expires).
    pub async fn run(self, stop: CancellationToken) -> Result<(), PlacementError> {
        let _owned = LoseAllOnDrop(Arc::clone(&self.inner.owned));
        let ended = self.lead(&stop).await;
        self.set(None);
        self.resign().await;
        ended
    }

    async fn lead(&self, stop: &CancellationToken) -> Result<(), PlacementError> {
        let elector = &self.inner.elector;
        loop {
            let token = tokio::select! {
                won = elector.campaign() => won.map_err(PlacementError::Election)?,
                () = stop.cancelled() => return Ok(()),
            };
            tracing::info!(election = self.name(), %token, "leading");
            self.set(Some(token));
            tokio::select! {
                biased;
                () = stop.cancelled() => {
                    self.step_down().await;
                    return Ok(());
                }
                () = elector.lost() => {}
            }
            tracing::error!(
                election = self.name(),
                "lost the leadership, cancelling reconciles"
            );
            self.inner.owned.lose_all_now();
            self.set(None);
            if !self.campaigns_again() {
                return Err(PlacementError::LostLeadership {
                    election: self.name().to_owned(),
                });
            }
            // Resign before campaigning again: the backend may still hold
            // this candidate's old lease.
            self.resign().await;
        }
    }

    /// Publishes the term: the slot owned with `token`, or not owned.
    fn set(&self, token: Option<FencingToken>) {
        let slot = self.inner.owned.count().shard_of(&0_u64);
        match token {
            Some(token) => self.inner.owned.gain(slot, token),
            None => drop(self.inner.owned.lose(slot)),
        }
        *self.inner.since.lock() = Instant::now();
        self.inner.term.send_replace(token);
    }

    /// A clean stop while leading: no new reconcile, the running ones
    /// waited for (already stopped by the runner, normally).
    async fn step_down(&self) {
        let slot = self.inner.owned.count().shard_of(&0_u64);
        if let Some((_, cancel)) = self.inner.owned.lose(slot) {
            *self.inner.since.lock() = Instant::now();
            self.inner.term.send_replace(None);
            let drained = self.inner.owned.drained(slot);
            if tokio::time::timeout(RESIGN_TIMEOUT, drained).await.is_err() {
                cancel.cancel();
            }
        }
    }

    /// Withdraws the candidacy, bounded: the backend may be what failed.
    async fn resign(&self) {
        match tokio::time::timeout(RESIGN_TIMEOUT, self.inner.elector.resign()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "resigning the leadership failed"),
            Err(_) => {
                tracing::warn!(timeout = ?RESIGN_TIMEOUT, "resigning the leadership timed out");
            }
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.name())
            .field("term", &*self.inner.term.borrow())
            .field("campaign_again", &self.campaigns_again())
            .finish()
    }
}
