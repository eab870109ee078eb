//! Where a controller runs: what its runner (the manager, the test
//! harness, a user's `main`) hands to [`Controller::run_in`](super::Controller::run_in).

use std::fmt;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Ownership;

/// What varies with where a controller runs, as one value: the stop and
/// abort tokens, the cap on its shutdown grace, how long it waits for its
/// caches, and which keys it may reconcile now (with which fencing token).
///
/// A controller is configured once, by its
/// [`ControllerBuilder`](super::ControllerBuilder); whoever runs it says
/// where with this. The [`Manager`](crate::manager::Manager) builds one per
/// controller from the controller's [`Placement`](crate::placement::Placement);
/// a test or a program of its own builds one the same way.
///
/// # Examples
///
/// A sharded controller without a manager: the sharding follows its
/// membership in a task of its own, the controller reconciles the keys of
/// the shards it owns.
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
/// use tend::controller::{Controller, Environment};
/// use tend::memory::MemoryStore;
/// use tend::placement::Sharding;
/// use tend::memory::MemoryMembershipGroup;
/// use tend::shard::ShardCount;
/// use tend::{CancellationToken, Informer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardCount::new(16)?;
/// let group = MemoryMembershipGroup::new("items", shards);
/// let sharding = Sharding::new(group.member("replica-0"), shards);
/// let items = Informer::builder(MemoryStore::<Item>::new("items")).build()?;
/// let controller = Controller::builder("items", &items, Noop).build()?;
///
/// let stop = CancellationToken::new();
/// let env = Environment::new(stop.clone()).ownership(sharding.ownership());
/// let informer = tokio::spawn({
///     let (items, stop) = (items.clone(), stop.clone());
///     async move { items.run(stop).await }
/// });
/// let following = tokio::spawn(sharding.clone().run(stop.clone()));
/// let running = tokio::spawn(controller.run_in(env));
/// # stop.cancel();
/// running.await??; // stops when `stop` is cancelled
/// following.await??; // hands every shard over, then leaves
/// informer.await??;
/// # Ok(()) }
/// ```
pub struct Environment<K> {
    pub(super) stop: CancellationToken,
    pub(super) abort: Option<CancellationToken>,
    pub(super) max_grace: Option<Duration>,
    pub(super) sync_timeout: Option<Duration>,
    pub(super) ownership: Option<Ownership<K>>,
}

impl<K> Environment<K> {
    /// Runs until `stop` is cancelled (then in-flight reconciles get the
    /// controller's shutdown grace), reconciling every key, with no fencing
    /// token: what [`Controller::run`](super::Controller::run) uses.
    #[must_use]
    pub fn new(stop: CancellationToken) -> Self {
        Self {
            stop,
            abort: None,
            max_grace: None,
            sync_timeout: None,
            ownership: None,
        }
    }

    /// A token that, when cancelled, cancels in-flight reconciles at once,
    /// without the grace period (a runner's own deadline passed).
    #[must_use]
    pub fn abort(mut self, abort: CancellationToken) -> Self {
        self.abort = Some(abort);
        self
    }

    /// Lowers the controller's shutdown grace to at most `max` (a runner's
    /// own shutdown bound).
    #[must_use]
    pub fn max_shutdown_grace(mut self, max: Duration) -> Self {
        self.max_grace = Some(max);
        self
    }

    /// How long the controller waits for its caches before failing,
    /// instead of its own [`sync_timeout`](super::ControllerBuilder::sync_timeout);
    /// `Duration::MAX` waits for ever. A zero timeout is refused when the
    /// controller runs.
    #[must_use]
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = Some(timeout);
        self
    }

    /// Reconciles only the keys `ownership` owns now, each with its
    /// fencing token in
    /// [`Context::fencing_token`](super::Context::fencing_token) and on the
    /// writes of [`Context::client`](super::Context::client).
    #[must_use]
    pub fn ownership(mut self, ownership: Ownership<K>) -> Self {
        self.ownership = Some(ownership);
        self
    }
}

impl<K> fmt::Debug for Environment<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("stopped", &self.stop.is_cancelled())
            .field("abort", &self.abort.is_some())
            .field("max_grace", &self.max_grace)
            .field("sync_timeout", &self.sync_timeout)
            .field("ownership", &self.ownership)
            .finish()
    }
}
