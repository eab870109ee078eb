//! What the manager runs: controllers and tasks, each with its placement,
//! with the controllers' object types erased.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::activity::{Activity, active_for};
use super::erased::ControllerView;
use super::metrics::Metrics;
use crate::controller::{Controller, ControllerError, Environment, Ownership, Reconciler};
use crate::error::BoxError;
use crate::object::Object;
use crate::placement::{Leadership, Placement, Sharding};
use crate::shard::ShardKey;

/// What a manager hands a controller it starts.
pub(super) struct Start {
    pub(super) stop: CancellationToken,
    pub(super) abort: CancellationToken,
    pub(super) max_grace: Duration,
    pub(super) sync_timeout: Duration,
}

/// A registered controller, its type erased.
pub(super) trait ErasedController: Send {
    fn start(self: Box<Self>, start: Start) -> BoxFuture<'static, Result<(), ControllerError>>;
}

/// A controller and the ownership its placement gives it.
struct Typed<O: Object, R> {
    controller: Controller<O, R>,
    ownership: Option<Ownership<O::Key>>,
}

impl<O: Object, R: Reconciler<O>> ErasedController for Typed<O, R> {
    fn start(self: Box<Self>, start: Start) -> BoxFuture<'static, Result<(), ControllerError>> {
        let mut env = Environment::new(start.stop)
            .abort(start.abort)
            .max_shutdown_grace(start.max_grace)
            .sync_timeout(start.sync_timeout);
        if let Some(ownership) = self.ownership {
            env = env.ownership(ownership);
        }
        Box::pin(self.controller.run_in(env))
    }
}

/// A registered controller: what the manager knows of it without its type.
pub(super) struct Placed {
    pub(super) view: ControllerView,
    pub(super) concurrency: usize,
    pub(super) controller: Box<dyn ErasedController>,
}

impl Placed {
    /// `controller` at `placement`, with the `ownership` it gives
    /// (`None`: every key, no token).
    ///
    /// # Errors
    ///
    /// [`ManagerError::UnfencedClient`] when it runs with fencing tokens
    /// and one of its clients cannot be fenced.
    pub(super) fn new<O: Object, R: Reconciler<O>>(
        controller: Controller<O, R>,
        placement: Placement,
        ownership: Option<Ownership<O::Key>>,
    ) -> Result<Self, ManagerError> {
        if let Some(&object_type) = controller.unfenced_clients().first()
            && ownership.is_some()
        {
            return Err(ManagerError::UnfencedClient {
                controller: controller.name().to_owned(),
                object_type,
            });
        }
        let view = ControllerView {
            name: controller.name().to_owned(),
            placement,
            queue: Arc::new(controller.queue()),
            journal: Arc::new(controller.journal()),
            hot_keys: Arc::new(controller.hot_keys()),
            footprint: Arc::new(controller.footprint()),
            reconcile_timeout: controller.reconcile_timeout(),
            informers: controller.informers(),
            required: controller.required_informers(),
        };
        Ok(Self {
            view,
            concurrency: controller.concurrency().get(),
            controller: Box::new(Typed {
                controller,
                ownership,
            }),
        })
    }
}

/// A task's future, boxed.
pub(super) type TaskFuture = BoxFuture<'static, Result<(), BoxError>>;

/// How a task is started: once, or each time its placement allows it.
pub(super) enum TaskRun {
    Once(Box<dyn FnOnce(CancellationToken) -> TaskFuture + Send>),
    Repeated(Box<dyn FnMut(CancellationToken) -> TaskFuture + Send>),
    /// A task started once already.
    Spent,
}

impl TaskRun {
    pub(super) fn once<F, Fut>(task: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        Self::Once(Box::new(move |cancel| Box::pin(task(cancel))))
    }

    pub(super) fn repeated<F, Fut>(mut task: F) -> Self
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        Self::Repeated(Box::new(move |cancel| Box::pin(task(cancel))))
    }

    /// Starts the task once (a repeated one can be started again).
    pub(super) fn start(&mut self, cancel: CancellationToken) -> Option<TaskFuture> {
        match std::mem::replace(self, Self::Spent) {
            Self::Once(task) => Some(task(cancel)),
            Self::Repeated(mut task) => {
                let future = task(cancel);
                *self = Self::Repeated(task);
                Some(future)
            }
            Self::Spent => None,
        }
    }
}

/// A registered task.
pub(super) struct Task {
    pub(super) name: String,
    pub(super) placement: Placement,
    pub(super) run: TaskRun,
}

/// Decides what a runnable's placement gives it, and records it in the
/// metrics and `/debug/runnables`: shared by the manager and its handles.
#[derive(Clone)]
pub(super) struct Placer {
    pub(super) leadership: Option<Leadership>,
    pub(super) sharding: Option<Sharding>,
    pub(super) metrics: Metrics,
    pub(super) activity: Arc<Activity>,
}

impl Placer {
    /// `controller` at its default placement: leader-only with an
    /// election, everywhere without election or membership.
    ///
    /// # Errors
    ///
    /// [`ManagerError::UnshardedController`] with a membership and no
    /// election; [`ManagerError::UnfencedClient`].
    pub(super) fn place_default<O: Object, R: Reconciler<O>>(
        &self,
        controller: Controller<O, R>,
    ) -> Result<Placed, ManagerError> {
        match (&self.leadership, &self.sharding) {
            (Some(leadership), _) => {
                let ownership = leadership.ownership();
                Placed::new(controller, Placement::Leader, Some(ownership))
            }
            (None, Some(_)) => Err(ManagerError::UnshardedController {
                controller: controller.name().to_owned(),
            }),
            (None, None) => Placed::new(controller, Placement::Everywhere, None),
        }
    }

    /// `controller` at `placement`.
    ///
    /// # Errors
    ///
    /// [`ManagerError::NoElection`], [`ManagerError::NoMembership`],
    /// [`ManagerError::UnfencedClient`].
    pub(super) fn place<O, R>(
        &self,
        controller: Controller<O, R>,
        placement: Placement,
    ) -> Result<Placed, ManagerError>
    where
        O: Object<Key: ShardKey>,
        R: Reconciler<O>,
    {
        let ownership = self.ownership::<O::Key>(controller.name(), placement)?;
        Placed::new(controller, placement, ownership)
    }

    /// The ownership a runnable placed at `placement` gets (`None`: every
    /// key, no token), or why it cannot be placed there.
    fn ownership<K: ShardKey>(
        &self,
        runnable: &str,
        placement: Placement,
    ) -> Result<Option<Ownership<K>>, ManagerError> {
        match placement {
            Placement::Everywhere => Ok(None),
            Placement::Leader => match &self.leadership {
                Some(leadership) => Ok(Some(leadership.ownership())),
                None => Err(ManagerError::NoElection {
                    runnable: runnable.to_owned(),
                }),
            },
            Placement::Sharded => match &self.sharding {
                Some(sharding) => Ok(Some(sharding.ownership())),
                None => Err(ManagerError::NoMembership {
                    runnable: runnable.to_owned(),
                }),
            },
        }
    }

    /// Records an accepted controller in the metrics and the activity.
    pub(super) fn admit(&self, placed: &Placed) {
        self.metrics.add_controller(placed);
        self.note(&placed.view.name, "controller", placed.view.placement);
    }

    /// Records a runnable's placement and activity.
    pub(super) fn note(&self, name: &str, kind: &str, placement: Placement) {
        let active = active_for(placement, self.leadership.as_ref(), self.sharding.as_ref());
        self.activity.add(name, kind, placement, active);
    }

    /// Forgets a removed controller's metrics and activity.
    pub(super) fn forget(&self, name: &str) {
        self.metrics.remove_controller(name);
        self.activity.remove(name, "controller");
    }
}
