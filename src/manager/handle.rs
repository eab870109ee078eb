//! [`ManagerHandle`]: controllers added to and removed from a running
//! manager.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::erased::SharedInformer;
use super::metrics::Metrics;
use super::runnable::{Placed, Placer};
use super::{Informers, ManagerError};
use crate::controller::{Controller, ControllerBuilder, Reconciler, Watch};
use crate::informer::{Informer, InformerError};
use crate::object::Object;
use crate::placement::Placement;
use crate::shard::ShardKey;

/// What a handle asks of the running manager.
pub(super) enum Command {
    /// Start a controller; answer once its caches synced (or the sync
    /// timeout passed).
    Add {
        placed: Placed,
        reply: oneshot::Sender<Result<(), ManagerError>>,
    },
    /// Stop a controller within its grace; answer once it stopped.
    Remove {
        name: String,
        reply: oneshot::Sender<Result<(), ManagerError>>,
    },
    /// A controller's task ended (sent by the task itself).
    Ended { name: String },
}

/// A handle to a [`Manager`](super::Manager), usable while it runs: adds
/// controllers (their informers created or shared, synced, then started)
/// and removes them (drained within their grace, then stopped). Get one
/// from [`Manager::handle`](super::Manager::handle) before calling `run`;
/// cheap to clone.
///
/// An informer registered here runs while some controller uses it, and is
/// stopped and forgotten (its metrics too) when the last one is removed;
/// one registered with [`Manager::informer`](super::Manager::informer)
/// before the manager ran keeps running.
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
/// use tend::Informer;
/// use tend::manager::Manager;
/// use tend::memory::MemoryStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = Manager::builder().without_signals().build()?;
/// let (handle, stop) = (manager.handle(), manager.shutdown_token());
/// let running = tokio::spawn(manager.run());
///
/// // Later, while it runs (a new tenant, a definition installed):
/// let store = MemoryStore::<Item>::new("items");
/// let items = handle.informer("items", || Informer::builder(store.clone()).build())?;
/// let controller = handle.controller("items", &items, Noop).build()?;
/// handle.add_controller(controller).await?; // started, its caches synced
/// handle.remove_controller("items").await?; // drained and stopped, its informer too
///
/// stop.cancel();
/// running.await??;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ManagerHandle {
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) informers: Arc<Informers>,
    pub(super) metrics: Metrics,
    pub(super) placer: Placer,
}

impl ManagerHandle {
    /// The informer registered as `name`, built with `make` the first time
    /// (as [`Manager::informer`](super::Manager::informer)). It is started
    /// when a controller reading it is added.
    ///
    /// # Errors
    ///
    /// [`ManagerError::InformerType`] when `name` is registered with
    /// another object type; [`ManagerError::Informer`] when `make` fails.
    pub fn informer<O: Object>(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<Informer<O>, InformerError>,
    ) -> Result<Informer<O>, ManagerError> {
        register_informer(&self.informers, &self.metrics, name, make, false)
    }

    /// Starts configuring a controller whose metrics the manager exports
    /// (as [`Manager::controller`](super::Manager::controller)).
    pub fn controller<O: Object, R: Reconciler<O>>(
        &self,
        name: &str,
        primary: impl Into<Watch<O>>,
        reconciler: R,
    ) -> ControllerBuilder<O, R> {
        self.metrics.controller_builder(name, primary, reconciler)
    }

    /// Adds `controller` at its default placement (see
    /// [`Manager::add_controller`](super::Manager::add_controller)) to the
    /// running manager, and returns once it started and its caches synced.
    ///
    /// Called before the manager runs, it waits until it does.
    ///
    /// # Errors
    ///
    /// As `Manager::add_controller`; [`ManagerError::NotRunning`] when the
    /// manager has stopped (or stops meanwhile);
    /// [`ManagerError::UnregisteredInformer`] when the controller reads an
    /// informer not registered with the manager; [`ManagerError::Informer`] when a cache did
    /// not sync within the sync timeout with
    /// [`UnsyncedCaches::Fail`](super::UnsyncedCaches::Fail) (the controller
    /// is removed then; with `Wait` it stays, and starts once its caches
    /// sync).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not undo the addition.
    pub async fn add_controller<O: Object, R: Reconciler<O>>(
        &self,
        controller: Controller<O, R>,
    ) -> Result<(), ManagerError> {
        let placed = self.placer.place_default(controller)?;
        self.add(placed).await
    }

    /// Adds `controller` at `placement` (see
    /// [`Manager::add_controller_on`](super::Manager::add_controller_on))
    /// to the running manager, and returns once it started and its caches
    /// synced.
    ///
    /// # Errors
    ///
    /// As [`add_controller`](Self::add_controller), and as
    /// `Manager::add_controller_on`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not undo the addition.
    pub async fn add_controller_on<O, R>(
        &self,
        controller: Controller<O, R>,
        placement: Placement,
    ) -> Result<(), ManagerError>
    where
        O: Object<Key: ShardKey>,
        R: Reconciler<O>,
    {
        let placed = self.placer.place(controller, placement)?;
        self.add(placed).await
    }

    async fn add(&self, placed: Placed) -> Result<(), ManagerError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Add { placed, reply })
            .map_err(|_| ManagerError::NotRunning)?;
        answer.await.unwrap_or(Err(ManagerError::NotRunning))
    }

    /// Removes controller `name` from the running manager: no new
    /// reconcile starts, running ones get its shutdown grace, then are
    /// cancelled; returns once it stopped, its metrics are gone, and the
    /// informers no one else uses are stopped. No reconcile of it runs
    /// after this returns. A controller meant to replace it under the same
    /// name must be built ([`controller`](Self::controller)) after this
    /// returns: one built before shares the removed metric series, which
    /// are no longer exported.
    ///
    /// # Errors
    ///
    /// [`ManagerError::UnknownController`] when no controller of that name
    /// runs; [`ManagerError::NotRunning`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not undo the removal.
    pub async fn remove_controller(&self, name: &str) -> Result<(), ManagerError> {
        let (reply, answer) = oneshot::channel();
        let name = name.to_owned();
        self.commands
            .send(Command::Remove { name, reply })
            .map_err(|_| ManagerError::NotRunning)?;
        answer.await.unwrap_or(Err(ManagerError::NotRunning))
    }
}

impl std::fmt::Debug for ManagerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerHandle")
            .field("running", &!self.commands.is_closed())
            .field("informers", &self.informers)
            .finish_non_exhaustive()
    }
}

/// The informer registered as `name` in `informers`, built with `make` and
/// registered (with its metrics) the first time.
pub(super) fn register_informer<O: Object>(
    informers: &Informers,
    metrics: &Metrics,
    name: &str,
    make: impl FnOnce() -> Result<Informer<O>, InformerError>,
    pinned: bool,
) -> Result<Informer<O>, ManagerError> {
    if let Some(found) = informers.find(name) {
        return found;
    }
    let informer = make().map_err(|source| ManagerError::Informer {
        informer: name.to_owned(),
        source,
    })?;
    let shared: Arc<dyn SharedInformer> = Arc::new(informer.clone());
    let (registered, ours) = informers.register(name, Arc::clone(&shared), pinned);
    if !ours {
        // Another call registered `name` meanwhile: share its informer.
        return registered
            .as_any()
            .downcast_ref::<Informer<O>>()
            .cloned()
            .ok_or_else(|| ManagerError::InformerType {
                informer: name.to_owned(),
            });
    }
    metrics.add_informer(name, shared);
    Ok(informer)
}
