//! What the manager needs from informers, controllers and queues of any
//! object type, with the type erased.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::controller::{Controller, ControllerError, Reconciler};
use crate::informer::{Informer, InformerError, InformerStats};
use crate::queue::{QueueKey, QueueStats, WorkQueue};
use crate::source::Object;

/// Reads the current fencing token (`None` when not leading).
pub(super) type FencingFn = Arc<dyn Fn() -> Option<u64> + Send + Sync>;

/// A registered informer.
pub(super) trait SharedInformer: Send + Sync {
    fn is_synced(&self) -> bool;
    fn stats(&self) -> InformerStats;
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, Result<(), InformerError>>;
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'static, Result<(), InformerError>>;
    fn as_any(&self) -> &dyn Any;
}

impl<O: Object> SharedInformer for Informer<O> {
    fn is_synced(&self) -> bool {
        Informer::is_synced(self)
    }

    fn stats(&self) -> InformerStats {
        Informer::stats(self)
    }

    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, Result<(), InformerError>> {
        let informer = self.clone();
        Box::pin(async move { informer.run(cancel).await })
    }

    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'static, Result<(), InformerError>> {
        let informer = self.clone();
        Box::pin(async move { informer.wait_synced(timeout).await })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A controller's queue, as `/debug/queues` and the metrics see it.
pub(super) trait QueueView: Send + Sync {
    fn stats(&self) -> QueueStats;
    /// The `limit` oldest in-flight keys (formatted with `Debug`) and ages.
    fn oldest_in_flight(&self, limit: usize) -> Vec<(String, Duration)>;
    fn shutdown(&self);
}

impl<K: QueueKey> QueueView for WorkQueue<K> {
    fn stats(&self) -> QueueStats {
        WorkQueue::stats(self)
    }

    fn oldest_in_flight(&self, limit: usize) -> Vec<(String, Duration)> {
        // `in_flight` lists the oldest first.
        self.in_flight()
            .into_iter()
            .take(limit)
            .map(|k| (format!("{:?}", k.key), k.age))
            .collect()
    }

    fn shutdown(&self) {
        WorkQueue::shutdown(self);
    }
}

/// A registered controller.
pub(super) trait ErasedController: Send {
    fn name(&self) -> &str;
    fn concurrency(&self) -> usize;
    fn queue(&self) -> Arc<dyn QueueView>;
    fn start(
        self: Box<Self>,
        shutdown: CancellationToken,
        abort: CancellationToken,
    ) -> BoxFuture<'static, Result<(), ControllerError>>;
}

impl<O: Object, R: Reconciler<O>> ErasedController for Controller<O, R> {
    fn name(&self) -> &str {
        Controller::name(self)
    }

    fn concurrency(&self) -> usize {
        Controller::concurrency(self).get()
    }

    fn queue(&self) -> Arc<dyn QueueView> {
        Arc::new(Controller::queue(self))
    }

    fn start(
        mut self: Box<Self>,
        shutdown: CancellationToken,
        abort: CancellationToken,
    ) -> BoxFuture<'static, Result<(), ControllerError>> {
        self.set_abort(abort);
        Box::pin((*self).run(shutdown))
    }
}
