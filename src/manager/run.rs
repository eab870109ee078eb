//! `Manager::run`: start the layers in order, wait, stop them in reverse.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::erased::SharedInformer;
use super::group::{Exit, Group};
use super::handle::Command;
use super::informers::Named;
use super::leader_tasks::LeaderTasks;
use super::live::{Live, Running};
use super::runnable::{Placed, Start};
use super::status::{Status, optional_only};
use super::{Manager, ManagerError, UnsyncedCaches, signals};
use crate::placement::Placement;

/// The running layers, in start order. Dropping them aborts every task.
pub(super) struct Layers {
    signals: Group,
    http: Group,
    tasks: Group,
    pub(super) informers: Group,
    /// The leadership and the sharding.
    placement: Group,
    /// Leader-only tasks, started and stopped with the leadership.
    leader_tasks: Group,
    pub(super) controllers: Group,
}

impl Layers {
    pub(super) fn new() -> Self {
        Self {
            signals: Group::new(),
            http: Group::new(),
            tasks: Group::new(),
            informers: Group::new(),
            placement: Group::new(),
            leader_tasks: Group::new(),
            controllers: Group::new(),
        }
    }

    /// The next task of any layer (but the signal watcher) to end.
    pub(super) async fn next_exit(&mut self) -> (String, Exit) {
        tokio::select! {
            exit = self.http.next_exit() => exit,
            exit = self.tasks.next_exit() => exit,
            exit = self.informers.next_exit() => exit,
            exit = self.placement.next_exit() => exit,
            exit = self.leader_tasks.next_exit() => exit,
            exit = self.controllers.next_exit() => exit,
        }
    }

    async fn abort_all(&mut self) {
        self.controllers.abort().await;
        self.leader_tasks.abort().await;
        self.placement.abort().await;
        self.informers.abort().await;
        self.tasks.abort().await;
        self.http.abort().await;
    }
}

impl Manager {
    /// Runs everything until shutdown (see the [module docs](crate::manager) for the
    /// order).
    ///
    /// # Errors
    ///
    /// `Ok(())` after a clean shutdown. Otherwise the first cause of the
    /// stop: [`ManagerError::Informer`] (naming the informer, with
    /// [`UnsyncedCaches::Fail`]), [`ManagerError::LostLeadership`],
    /// [`ManagerError::LostMembership`], [`ManagerError::TaskFailed`],
    /// [`ManagerError::Controller`], [`ManagerError::Informer`],
    /// [`ManagerError::Election`], [`ManagerError::Membership`],
    /// [`ManagerError::Signals`] or [`ManagerError::Http`]; and, when the
    /// stop itself was cut short, [`ManagerError::ShutdownTimeout`] or
    /// [`ManagerError::ForcedShutdown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts every task (they are owned by it) without
    /// the graceful shutdown, and resigns the leadership when the elector
    /// does so on drop: cancel [`shutdown_token`](Manager::shutdown_token)
    /// and await `run` instead.
    pub async fn run(mut self) -> Result<(), ManagerError> {
        let stop = self.shutdown.clone();
        let force = CancellationToken::new();
        let mut layers = Layers::new();
        if let Some(stream) =
            std::mem::replace(&mut self.signals, super::Signals::Off).into_stream()?
        {
            let (stop, force) = (stop.clone(), force.clone());
            layers.signals.spawn("signals", async move {
                signals::watch(stream, stop, force).await;
                Ok(())
            });
        }
        let status = Arc::new(self.status());
        self.start_http(&mut layers, &status);
        self.start_tasks(&mut layers);
        self.start_informers(&mut layers);
        let abort = CancellationToken::new();
        let mut running = Running {
            layers,
            live: HashMap::new(),
            inbox: self.inbox.take(),
            status: Arc::clone(&status),
            abort: abort.clone(),
        };
        let cause = self.start(&mut running, &stop).await;
        let mut layers = running.layers;
        if let Err(error) = &cause {
            status.set_failed(error.to_string());
        }
        let stopped = self.stop(&mut layers, &status, &force, &abort).await;
        layers.signals.abort().await;
        cause.and(stopped)
    }

    fn status(&self) -> Status {
        Status {
            informers: Arc::clone(&self.informers),
            controllers: Mutex::new(self.controllers.iter().map(|c| c.view.clone()).collect()),
            activity: Arc::clone(&self.placer.activity),
            stalls: self.config.stalls,
            leadership: self.placer.leadership.clone(),
            sharding: self.placer.sharding.clone(),
            standby_ready: self.config.standby_ready,
            ready_lag: self.config.ready_lag,
            stopping: AtomicBool::new(false),
            failed: Mutex::new(None),
        }
    }

    #[cfg(feature = "http")]
    fn start_http(&mut self, layers: &mut Layers, status: &Arc<Status>) {
        if let Some(listener) = self.listener.take() {
            let registry = std::mem::take(&mut self.registry);
            let serve =
                super::http::serve(listener, registry, Arc::clone(status), layers.http.token());
            layers.http.spawn("http server", serve);
        }
    }

    #[cfg(not(feature = "http"))]
    fn start_http(&mut self, _layers: &mut Layers, _status: &Arc<Status>) {}

    /// Starts the tasks that run everywhere.
    fn start_tasks(&mut self, layers: &mut Layers) {
        for task in &mut self.tasks {
            if task.placement != Placement::Everywhere {
                continue;
            }
            let Some(run) = task.run.start(layers.tasks.token()) else {
                continue;
            };
            let name = task.name.clone();
            layers.tasks.spawn(task.name.clone(), async move {
                run.await
                    .map_err(|source| ManagerError::TaskFailed { task: name, source })
            });
        }
    }

    fn start_informers(&self, layers: &mut Layers) {
        for (informer, stop) in self.informers.start_pinned(&layers.informers.token()) {
            spawn_informer(layers, &informer, stop);
        }
    }

    /// Starts the controllers, waits for the caches, then the leadership
    /// and the sharding; serves the handles until a stop; returns why it
    /// stopped.
    async fn start(&mut self, running: &mut Running, stop: &CancellationToken) -> Exit {
        for placed in std::mem::take(&mut self.controllers) {
            self.start_controller(running, placed);
        }
        let optional = optional_only(&running.status.controllers.lock());
        let informers = self.informers.awaited(&optional);
        let synced = wait_synced(&informers, self.config.sync_timeout, self.config.unsynced);
        match self.until(running, stop, synced).await {
            Ok(synced) => synced?,
            Err(cause) => return cause,
        }
        self.start_placement(&mut running.layers);
        match self
            .until(running, stop, std::future::pending::<()>())
            .await
        {
            Ok(()) => Ok(()),
            Err(cause) => cause,
        }
    }

    /// Waits for `future` unless a stop is requested or a task fails
    /// first, carrying out the handles' commands meanwhile.
    async fn until<T>(
        &mut self,
        running: &mut Running,
        stop: &CancellationToken,
        future: impl Future<Output = T>,
    ) -> Result<T, Exit> {
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return Err(Ok(())),
                (name, exit) = running.layers.next_exit() => match exit {
                    Ok(()) => tracing::debug!(task = %name, "task finished"),
                    Err(error) => return Err(Err(error)),
                },
                Some(command) = next_command(&mut running.inbox) => self.command(running, command),
                value = &mut future => return Ok(value),
            }
        }
    }

    /// Starts one controller in the controllers' layer: its informers not
    /// running yet first. Its task tells the manager when it ends.
    pub(super) fn start_controller(&mut self, running: &mut Running, placed: Placed) {
        let layers = &mut running.layers;
        let ids = placed.view.informers.clone();
        for (informer, stop) in self.informers.acquire(&ids, &layers.informers.token()) {
            spawn_informer(layers, &informer, stop);
        }
        let stop = layers.controllers.token().child_token();
        let start = Start {
            stop: stop.clone(),
            abort: running.abort.clone(),
            max_grace: self.config.controller_grace(),
            // The manager decides what a cache that does not sync does.
            sync_timeout: Duration::MAX,
        };
        let name = placed.view.name.clone();
        let run = placed.controller.start(start);
        let (controller, ended) = (name.clone(), self.commands.clone());
        layers.controllers.spawn(name.clone(), async move {
            let exit = run.await;
            let _ = ended.send(Command::Ended {
                name: controller.clone(),
            });
            exit.map_err(|source| ManagerError::Controller { controller, source })
        });
        let live = Live {
            stop,
            informers: ids,
            removing: Vec::new(),
        };
        running.live.insert(name, live);
    }

    /// Starts the leadership (with its leader-only tasks) and the sharding.
    fn start_placement(&mut self, layers: &mut Layers) {
        if let Some(leadership) = self.placer.leadership.clone() {
            let token = layers.placement.token();
            layers.placement.spawn("leader election", async move {
                leadership.run(token).await.map_err(ManagerError::from)
            });
        }
        if let Some(leadership) = self.placer.leadership.clone() {
            let tasks = std::mem::take(&mut self.tasks)
                .into_iter()
                .filter(|task| task.placement == Placement::Leader)
                .collect();
            let follower = LeaderTasks::new(
                leadership,
                tasks,
                self.placer.metrics.clone(),
                self.config.controller_grace(),
            );
            let token = layers.leader_tasks.token();
            layers
                .leader_tasks
                .spawn("leader-only tasks", follower.run(token));
        }
        if let Some(sharding) = self.placer.sharding.clone() {
            let token = layers.placement.token();
            layers.placement.spawn("sharding", async move {
                sharding.run(token).await.map_err(ManagerError::from)
            });
        }
    }

    /// Stops the layers in reverse order within the graceful-shutdown
    /// timeout; aborts what is left when it passes or a second signal comes.
    async fn stop(
        &mut self,
        layers: &mut Layers,
        status: &Status,
        force: &CancellationToken,
        abort: &CancellationToken,
    ) -> Exit {
        status.stopping.store(true, Ordering::Release);
        let grace = self.config.grace;
        let deadline = crate::time::deadline(Instant::now(), grace);
        tracing::info!(?grace, "shutting down");
        let ended = {
            let orderly = stop_in_order(layers);
            tokio::select! {
                biased;
                () = force.cancelled() => Err(ManagerError::ForcedShutdown),
                stopped = tokio::time::timeout_at(deadline, orderly) => {
                    stopped.unwrap_or(Err(ManagerError::ShutdownTimeout { timeout: grace }))
                }
            }
        };
        if matches!(
            ended,
            Err(ManagerError::ForcedShutdown | ManagerError::ShutdownTimeout { .. })
        ) {
            tracing::warn!("aborting the tasks still running");
            abort.cancel();
            layers.abort_all().await;
        }
        ended
    }
}

/// Controllers, then leader-only tasks, then the leadership (which
/// resigns) and the sharding (which hands its shards over and leaves), then
/// tasks, informers and the HTTP server; the first error.
async fn stop_in_order(layers: &mut Layers) -> Exit {
    let mut first = Ok(());
    for group in [
        &mut layers.controllers,
        &mut layers.leader_tasks,
        &mut layers.placement,
        &mut layers.tasks,
        &mut layers.informers,
        &mut layers.http,
    ] {
        let stopped = group.stop().await;
        if first.is_ok() {
            first = stopped;
        }
    }
    first
}

/// Runs a registered informer in the informers' layer until `stop`.
pub(super) fn spawn_informer(layers: &mut Layers, informer: &Named, stop: CancellationToken) {
    let run = informer.shared.run(stop);
    let name = informer.name.clone();
    layers
        .informers
        .spawn(format!("informer {name}"), async move {
            run.await.map_err(|source| ManagerError::Informer {
                informer: name,
                source,
            })
        });
}

/// The next command of a handle (pending for ever without an inbox).
async fn next_command(inbox: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match inbox {
        Some(inbox) => inbox.recv().await,
        None => std::future::pending().await,
    }
}

/// Waits until every informer has synced, within one overall timeout;
/// past it, fails naming the first informer not synced
/// ([`UnsyncedCaches::Fail`]) or goes on ([`UnsyncedCaches::Wait`]).
pub(super) async fn wait_synced(
    informers: &[(String, Arc<dyn SharedInformer>)],
    timeout: Duration,
    unsynced: UnsyncedCaches,
) -> Exit {
    let deadline = crate::time::deadline(Instant::now(), timeout);
    for (name, informer) in informers {
        let left = deadline.saturating_duration_since(Instant::now());
        let Err(source) = informer.wait_synced(left).await else {
            continue;
        };
        if unsynced == UnsyncedCaches::Fail {
            return Err(ManagerError::Informer {
                informer: name.clone(),
                source,
            });
        }
        tracing::warn!(informer = %name, error = %source, "not synced within the sync timeout; its controllers wait for it, the others run");
    }
    tracing::info!(informers = informers.len(), "caches synced (or waited for)");
    Ok(())
}
