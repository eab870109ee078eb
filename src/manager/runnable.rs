//! What the manager runs: controllers and tasks, each with its placement,
//! with the controllers' object types erased.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::erased::ControllerView;
use crate::controller::{Controller, ControllerError, Environment, Ownership, Reconciler};
use crate::placement::Placement;
use crate::source::{BoxError, Object};

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
    /// `controller` at `placement` with its `ownership` (`None`:
    /// everywhere).
    ///
    /// # Errors
    ///
    /// [`ManagerError::UnfencedClient`] when it runs with fencing tokens
    /// and one of its clients cannot be fenced.
    pub(super) fn new<O: Object, R: Reconciler<O>>(
        controller: Controller<O, R>,
        ownership: Option<(Placement, Ownership<O::Key>)>,
    ) -> Result<Self, ManagerError> {
        let (placement, ownership) = match ownership {
            Some((placement, ownership)) => (placement, Some(ownership)),
            None => (Placement::Everywhere, None),
        };
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
            reconcile_timeout: controller.reconcile_timeout(),
            informers: controller.informers(),
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
