//! Configuration of a [`Manager`].

use std::fmt;
#[cfg(feature = "http")]
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use prometheus_client::registry::Registry;

use super::health::StallLimits;
use super::signals::Signals;
use super::{Manager, ManagerError, ManagerSetting};
use crate::election::LeaderElector;
use crate::error::SettingError;
use crate::shard::{Membership, ShardCount};

/// Configures a [`Manager`]; start from [`Manager::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::manager::{Manager, ManagerError, ManagerSetting};
/// use tend::memory::MemoryElectionGroup;
///
/// let election = MemoryElectionGroup::new("operator");
/// let manager = Manager::builder()
///     .leader_election(election.candidate()) // leader-only runnables run while leading
///     .graceful_shutdown_timeout(Duration::from_secs(20))
///     .sync_timeout(Duration::from_secs(60))
///     .without_signals() // stopped by `shutdown_token` only: a test, an embedding
///     .build()?;
/// assert!(manager.leadership().is_some_and(|leadership| !leadership.is_leader()));
///
/// let zero = Manager::builder().sync_timeout(Duration::ZERO).build();
/// assert!(matches!(zero, Err(ManagerError::InvalidConfig { setting: ManagerSetting::SyncTimeout, .. })));
/// # Ok::<(), ManagerError>(())
/// ```
#[must_use]
pub struct ManagerBuilder {
    #[cfg(feature = "http")]
    pub(super) http_address: Option<SocketAddr>,
    pub(super) grace: Duration,
    pub(super) sync_timeout: Duration,
    pub(super) elector: Option<Arc<dyn LeaderElector>>,
    pub(super) sharding: Option<(Arc<dyn Membership>, ShardCount)>,
    pub(super) handover: Duration,
    pub(super) campaign_again: bool,
    pub(super) unsynced: UnsyncedCaches,
    pub(super) standby_ready: bool,
    pub(super) ready_lag: Option<Duration>,
    pub(super) stalls: StallLimits,
    pub(super) signals: Signals,
    pub(super) registry: Option<Registry>,
}

impl ManagerBuilder {
    pub(super) fn new() -> Self {
        Self {
            #[cfg(feature = "http")]
            http_address: None,
            grace: Duration::from_secs(30),
            sync_timeout: Duration::from_secs(120),
            elector: None,
            sharding: None,
            handover: Duration::from_secs(10),
            campaign_again: false,
            unsynced: UnsyncedCaches::Wait,
            standby_ready: true,
            ready_lag: None,
            stalls: StallLimits::DEFAULT,
            signals: Signals::Os,
            registry: None,
        }
    }

    /// Serves `/metrics`, `/healthz`, `/readyz`, `/debug/queues` and (with sharding) `/debug/shards` on
    /// `address` (default: no server). Port 0 picks a free port: read it
    /// from [`Manager::http_address`].
    #[cfg(feature = "http")]
    pub fn http_address(mut self, address: SocketAddr) -> Self {
        self.http_address = Some(address);
        self
    }

    /// How long shutdown may take in all, from the first signal until every
    /// task has stopped, before the remaining tasks are aborted (default
    /// 30 s). Must not be zero; `Duration::MAX` means no limit. Each
    /// controller's own shutdown grace is cut to 80 % of this.
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.grace = timeout;
        self
    }

    /// How long the manager waits for every informer's first list (default
    /// 2 minutes): then the leader election and the membership start even if
    /// some cache has not synced, and with [`UnsyncedCaches::Fail`] `run`
    /// fails. Must not be zero; `Duration::MAX` waits for ever.
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// What a cache that has not synced within the
    /// [sync timeout](Self::sync_timeout) does (default
    /// [`UnsyncedCaches::Wait`]; see the [module docs](super#caches-that-do-not-sync)).
    pub fn unsynced_caches(mut self, unsynced: UnsyncedCaches) -> Self {
        self.unsynced = unsynced;
        self
    }

    /// Runs leader-only controllers and tasks (see
    /// [`Manager::add_controller_on`] and [`Manager::add_task_on`]) only
    /// while `elector` holds the leadership (default: no election).
    /// Leader-only controllers stand by warm elsewhere.
    pub fn leader_election(mut self, elector: impl LeaderElector) -> Self {
        self.elector = Some(Arc::new(elector));
        self
    }

    /// After a lost leadership, stand by and campaign again instead of
    /// failing `run` with [`ManagerError::LostLeadership`](super::ManagerError::LostLeadership)
    /// (default `false`: the process should exit). Leader-only reconciles
    /// are cancelled at once either way; standing by, leader-only tasks are
    /// stopped and started again on winning again, and leader-only
    /// controllers keep their queues and reconcile again, with the new
    /// token, once this replica leads again.
    pub fn campaign_again(mut self, again: bool) -> Self {
        self.campaign_again = again;
        self
    }

    /// Spreads the keys of the controllers registered with
    /// [`Placement::Sharded`](crate::placement::Placement::Sharded) over the
    /// replicas of `membership`'s group, in `shards` shards (default: no
    /// sharding). A manager may have leader election beside it, for its
    /// leader-only runnables: the two leases are independent.
    ///
    /// Every replica runs its informers (all keys cached); each reconciles
    /// only the keys of the shards it owns. `run` joins the group once the
    /// caches have synced, watches its members, computes the
    /// [`Assignment`](crate::shard::Assignment) and acquires each shard
    /// assigned here (waiting until its previous owner released it); on
    /// acquiring one, it queues the shard's cached keys at the background
    /// priority ([`Trigger::Acquired`](crate::controller::Trigger::Acquired)).
    /// A shard assigned away stops starting reconciles at once; running
    /// ones get the [handover timeout](Self::shard_handover_timeout), then
    /// are cancelled; then the shard is released. A lost membership stops
    /// every reconcile and fails `run` with
    /// [`ManagerError::LostMembership`]. Reconciles get their shard's token
    /// in [`Context::fencing_token`](crate::controller::Context::fencing_token).
    ///
    /// `shards` must be the membership's shard count (an
    /// [`MemoryMembershipGroup`](crate::memory::MemoryMembershipGroup)'s, for
    /// one); every replica must use the same.
    ///
    /// # Examples
    ///
    /// ```
    /// use tend::manager::Manager;
    /// use tend::memory::MemoryMembershipGroup;
    /// use tend::shard::ShardCount;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let shards = ShardCount::new(64)?;
    /// let group = MemoryMembershipGroup::new("widgets", shards);
    /// let replica = Manager::builder()
    ///     .sharding(group.member("replica-0"), shards)
    ///     .without_signals()
    ///     .build()?;
    /// // replica.add_sharded_controller(…)?; replica.run().await?;
    /// # drop(replica);
    /// # Ok(())
    /// # }
    /// ```
    pub fn sharding(mut self, membership: impl Membership, shards: ShardCount) -> Self {
        self.sharding = Some((Arc::new(membership), shards));
        self
    }

    /// How long a shard being handed over waits for its running reconciles
    /// before cancelling them (default 10 s; zero cancels them at once).
    /// `/readyz` also waits at most three times this for the replica's
    /// assigned share.
    pub fn shard_handover_timeout(mut self, timeout: Duration) -> Self {
        self.handover = timeout;
        self
    }

    /// Whether a standby (not leading) replica answers `/readyz` with ready
    /// (default `true`: it is healthy and ready to take over; set `false`
    /// when only the leader may receive traffic).
    pub fn standby_is_ready(mut self, ready: bool) -> Self {
        self.standby_ready = ready;
        self
    }

    /// `/readyz` fails while an informer whose sync someone waits for has
    /// lagged its source for longer than `bound`: its cache has lacked a
    /// revision the source had for that long ([`CacheLag::behind_for`]),
    /// naming the informer. Off by default. The lag is measured at the
    /// informer's probes ([`InformerBuilder::lag_probe_every`], 10 s by
    /// default), so keep the bound above a probe period; on etcd and
    /// Kubernetes a quiet cache catches up at its next bookmark (see
    /// [`Source::head`]). Must not be zero.
    ///
    /// [`CacheLag::behind_for`]: crate::CacheLag::behind_for
    /// [`InformerBuilder::lag_probe_every`]: crate::InformerBuilder::lag_probe_every
    /// [`Source::head`]: crate::Source::head
    pub fn not_ready_while_lagging(mut self, bound: Duration) -> Self {
        self.ready_lag = Some(bound);
        self
    }

    /// `/healthz` fails while a controller holds a key longer than
    /// `timeouts` × its reconcile timeout (default 3), naming the controller
    /// and its oldest such keys.
    ///
    /// A worker cancels a reconcile at its timeout, so a key held at a
    /// multiple of it means the worker is wedged (a reconcile that blocks
    /// its thread, a destructor that hangs), which only a restart cures.
    /// The slack above one timeout covers a busy runtime and synchronous
    /// work before the reconcile's first `.await` (its timer starts there).
    pub fn stuck_key_after_timeouts(mut self, timeouts: NonZeroU32) -> Self {
        self.stalls.timeouts = Some(timeouts);
        self
    }

    /// `/healthz` also fails while a controller holds a key longer than
    /// `bound`, whatever its reconcile timeout (default: no such bound). The
    /// shorter of this and [`stuck_key_after_timeouts`](Self::stuck_key_after_timeouts)
    /// applies; this one also covers controllers whose timeout is so large
    /// that its multiple does not fit a `Duration`.
    pub fn stuck_key_after(mut self, bound: Duration) -> Self {
        self.stalls.held = Some(bound);
        self
    }

    /// `/healthz` fails while an informer's source has kept failing for
    /// longer than `bound` (default 15 minutes), naming the informer: every
    /// list and watch since then failed, and nothing (no list, change,
    /// bookmark or opened watch) succeeded. A source that is merely quiet
    /// is healthy. `Duration::MAX` turns the check off.
    ///
    /// A restart helps when the fault is this process's (a dead connection
    /// pool, stale credentials or DNS) while other replicas are fine; when
    /// the source is down for everyone, restarts are harmless but do not
    /// help, so keep the bound well past the outages you ride out.
    pub fn stalled_informer_after(mut self, bound: Duration) -> Self {
        self.stalls.informer = Some(bound);
        self
    }

    /// Turns off the stall checks above: `/healthz` fails only once a task
    /// has failed. A later call of one of them turns that check back on.
    pub fn without_stall_checks(mut self) -> Self {
        self.stalls = StallLimits::OFF;
        self
    }

    /// Takes shutdown signals from `signals` instead of SIGTERM/SIGINT: the
    /// first item starts a graceful shutdown, the second forces it. For tests
    /// and for embedding in a program that handles signals itself.
    pub fn signals(mut self, signals: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.signals = Signals::Stream(signals.boxed());
        self
    }

    /// Ignores signals: only [`Manager::shutdown_token`] stops the manager.
    pub fn without_signals(mut self) -> Self {
        self.signals = Signals::Off;
        self
    }

    /// Registers the manager's metrics in `registry` (default: a new one),
    /// e.g. one made with a prefix or constant labels.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Builds the manager, binding the HTTP address if one was set (the
    /// server starts serving in [`Manager::run`]).
    ///
    /// # Errors
    ///
    /// [`ManagerError::InvalidConfig`] for a zero timeout or stall bound;
    /// [`ManagerError::Http`] when the address cannot be bound.
    pub fn build(self) -> Result<Manager, ManagerError> {
        let zero = [
            (ManagerSetting::GracefulShutdownTimeout, Some(self.grace)),
            (ManagerSetting::SyncTimeout, Some(self.sync_timeout)),
            (ManagerSetting::StuckKeyAfter, self.stalls.held),
            (ManagerSetting::StalledInformerAfter, self.stalls.informer),
            (ManagerSetting::NotReadyWhileLagging, self.ready_lag),
        ]
        .into_iter()
        .find(|(_, value)| value.is_some_and(|d| d.is_zero()));
        if let Some((setting, _)) = zero {
            return Err(ManagerError::InvalidConfig {
                setting,
                error: SettingError::Zero,
            });
        }
        Manager::assemble(self)
    }
}

/// What a controller whose caches have not synced within the manager's
/// [sync timeout](ManagerBuilder::sync_timeout) does.
///
/// # Examples
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
/// # tend::impl_object!(Item, key: name: String, version: version);
/// # struct Noop;
/// # impl Reconciler<Item> for Noop {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// use std::time::Duration;
/// use tend::manager::{Manager, ManagerError, UnsyncedCaches};
/// use tend::memory::MemoryStore;
/// use tend::{Informer, InformerError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::<Item>::new("items");
/// store.fail_next_lists(u32::MAX); // a source that never answers
/// let mut manager = Manager::builder()
///     .sync_timeout(Duration::from_secs(30))
///     .unsynced_caches(UnsyncedCaches::Fail)
///     .without_signals()
///     .build()?;
/// let items = manager.informer("items", || Informer::builder(store).build())?;
/// manager.add_controller(manager.controller("items", &items, Noop).build()?)?;
/// let Err(ManagerError::Informer { informer, source }) = manager.run().await else { unreachable!() };
/// assert_eq!(informer, "items");
/// assert!(matches!(source, InformerError::SyncTimeout { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnsyncedCaches {
    /// It waits for as long as it takes; the manager's other controllers
    /// run, and `/readyz` names what has not synced.
    #[default]
    Wait,
    /// `run` fails with [`ManagerError::Informer`] naming the informer (its source [`InformerError::SyncTimeout`](crate::InformerError::SyncTimeout)).
    Fail,
}

impl fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("ManagerBuilder");
        #[cfg(feature = "http")]
        s.field("http_address", &self.http_address);
        s.field("grace", &self.grace)
            .field("sync_timeout", &self.sync_timeout)
            .field("leader_election", &self.elector.as_ref().map(|e| e.name()))
            .field(
                "sharding",
                &self.sharding.as_ref().map(|(m, s)| (m.group(), s.get())),
            )
            .field("campaign_again", &self.campaign_again)
            .field("unsynced", &self.unsynced)
            .field("standby_ready", &self.standby_ready)
            .field("ready_lag", &self.ready_lag)
            .field("stalls", &self.stalls)
            .field("signals", &self.signals)
            .finish_non_exhaustive()
    }
}
