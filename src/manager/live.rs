//! A running manager's controllers, and the handles' commands on them:
//! add (informers shared or started, then the controller), remove (drained
//! within its grace), and the end of a controller's task (its informers
//! released, its metrics forgotten).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::erased::SharedInformer;
use super::handle::Command;
use super::run::{Layers, wait_synced};
use super::runnable::Placed;
use super::status::Status;
use super::{Manager, ManagerError, UnsyncedCaches};
use crate::informer::InformerId;

/// What `run` holds while it runs.
pub(super) struct Running {
    pub(super) layers: Layers,
    /// The controllers started, by name.
    pub(super) live: HashMap<String, Live>,
    pub(super) inbox: Option<mpsc::UnboundedReceiver<Command>>,
    pub(super) status: Arc<Status>,
    /// Cancels every reconcile at once (a shutdown past its bound).
    pub(super) abort: CancellationToken,
}

/// One started controller.
pub(super) struct Live {
    /// Its own stop.
    pub(super) stop: CancellationToken,
    /// The informers it reads.
    pub(super) informers: Vec<InformerId>,
    /// Removals waiting for it to stop.
    pub(super) removing: Vec<oneshot::Sender<Result<(), ManagerError>>>,
}

impl Manager {
    /// Carries out one command; never waits.
    pub(super) fn command(&mut self, running: &mut Running, command: Command) {
        match command {
            Command::Add { placed, reply } => self.add_live(running, placed, reply),
            Command::Remove { name, reply } => match running.live.get_mut(&name) {
                Some(live) => {
                    live.stop.cancel();
                    live.removing.push(reply);
                }
                None => {
                    let _ = reply.send(Err(ManagerError::UnknownController { controller: name }));
                }
            },
            Command::Ended { name } => self.ended(running, &name),
        }
    }

    /// Starts `placed`, and answers `reply` once its caches synced.
    fn add_live(
        &mut self,
        running: &mut Running,
        placed: Placed,
        reply: oneshot::Sender<Result<(), ManagerError>>,
    ) {
        let name = placed.view.name.clone();
        if running.live.contains_key(&name) {
            let _ = reply.send(Err(ManagerError::DuplicateController { controller: name }));
            return;
        }
        if !self.informers.knows(&placed.view.informers) {
            let _ = reply.send(Err(ManagerError::UnregisteredInformer { controller: name }));
            return;
        }
        self.placer.admit(&placed);
        running.status.controllers.lock().push(placed.view.clone());
        let reads: Vec<_> = self
            .informers
            .all()
            .into_iter()
            .filter(|(_, informer)| placed.view.required.contains(&informer.id()))
            .collect();
        self.start_controller(running, placed);
        let synced = Synced {
            name,
            informers: reads,
            timeout: self.config.sync_timeout,
            unsynced: self.config.unsynced,
            commands: self.commands.clone(),
            stop: running.layers.controllers.token(),
        };
        running
            .layers
            .controllers
            .spawn(format!("adding {}", synced.name), synced.answer(reply));
    }

    /// A controller's task ended: its informers no one uses are stopped,
    /// its metrics and status forgotten, its removals answered.
    fn ended(&mut self, running: &mut Running, name: &str) {
        let Some(live) = running.live.remove(name) else {
            return;
        };
        for stopped in self.informers.release(&live.informers) {
            self.placer.metrics.remove_informer(&stopped.name);
            tracing::info!(informer = %stopped.name, "stopped an informer no controller reads");
        }
        self.placer.forget(name);
        running
            .status
            .controllers
            .lock()
            .retain(|view| view.name != name);
        tracing::info!(controller = %name, "removed");
        for reply in live.removing {
            let _ = reply.send(Ok(()));
        }
    }
}

/// Waits for an added controller's caches, then answers its adder.
struct Synced {
    name: String,
    informers: Vec<(String, Arc<dyn SharedInformer>)>,
    timeout: Duration,
    unsynced: UnsyncedCaches,
    commands: mpsc::UnboundedSender<Command>,
    /// The controllers' layer stopping: the adder is told `NotRunning`.
    stop: CancellationToken,
}

impl Synced {
    async fn answer(
        self,
        reply: oneshot::Sender<Result<(), ManagerError>>,
    ) -> Result<(), ManagerError> {
        let answer = tokio::select! {
            () = self.stop.cancelled() => Err(ManagerError::NotRunning),
            answer = self.wait() => answer,
        };
        let _ = reply.send(answer);
        Ok(())
    }

    /// Ok once every cache synced (or, `Wait`, the timeout passed); with
    /// `Fail`, the controller is removed again: it cannot run here.
    async fn wait(&self) -> Result<(), ManagerError> {
        let waited = wait_synced(&self.informers, self.timeout, self.unsynced).await;
        if waited.is_err() {
            let (removed, _) = oneshot::channel();
            let name = self.name.clone();
            let _ = self.commands.send(Command::Remove {
                name,
                reply: removed,
            });
        }
        waited
    }
}
