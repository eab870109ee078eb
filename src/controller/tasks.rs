//! The tasks of a controller run: the workers and the resync timer
//! spawned, the gate's task, the hard stop, and the drain at shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::worker::Worker;
use super::{Environment, Reconciler};
use crate::object::Object;

/// Spawns the workers (and the resync task) of a controller run.
pub(super) fn spawn_workers<O: Object, R: Reconciler<O>>(
    worker: &Arc<Worker<O, R>>,
    hard_stop: &CancellationToken,
    resync: Option<Duration>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for _ in 0..worker.workers {
        tasks.spawn(Arc::clone(worker).run(hard_stop.clone()));
    }
    if let Some(period) = resync {
        tasks.spawn(Arc::clone(worker).resync_every(period, worker.stopping.clone()));
    }
    tasks
}

/// Waits `grace` for the workers of controller `name` to finish, then
/// cancels the reconciles still running and waits for them.
pub(super) async fn drain(
    tasks: &mut JoinSet<()>,
    grace: Duration,
    hard_stop: &CancellationToken,
    name: &str,
) {
    if tokio::time::timeout(grace, join_all(tasks)).await.is_err() {
        tracing::warn!(controller = %name, ?grace, "grace period over, cancelling in-flight reconciles");
        hard_stop.cancel();
        join_all(tasks).await;
    }
}

/// Waits for every task, logging any that panicked outside a reconcile.
pub(super) async fn join_all(tasks: &mut JoinSet<()>) {
    while let Some(result) = tasks.join_next().await {
        if let Err(error) = result {
            tracing::error!(%error, "controller task failed");
        }
    }
}

/// The token that ends the workers at once: a child of the environment's
/// abort token, or a token of its own.
pub(super) fn hard_stop_of<K>(env: &Environment<K>) -> CancellationToken {
    env.abort
        .as_ref()
        .map_or_else(CancellationToken::new, CancellationToken::child_token)
}

/// Ends the keys held for their writes (read-your-writes on), until the
/// token returned is cancelled: after the workers stop.
pub(super) fn spawn_gate<O: Object, R: Reconciler<O>>(
    worker: &Arc<Worker<O, R>>,
) -> (CancellationToken, JoinSet<()>) {
    let gated = CancellationToken::new();
    let mut gate = JoinSet::new();
    if worker.gate.is_some() {
        gate.spawn(Arc::clone(worker).watch_writes(gated.clone()));
    }
    if worker.spacer.is_some() {
        gate.spawn(Arc::clone(worker).space_keys(gated.clone()));
    }
    (gated, gate)
}
