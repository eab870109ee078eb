//! `Manager::run`: start the layers in order, wait, stop them in reverse.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::erased::{ControllerView, QueueView, SharedInformer};
use super::group::{Exit, Group};
use super::metrics::Metrics;
use super::sharding::Ownership;
use super::status::Status;
use super::{LeaderElector, Manager, ManagerError, signals};

/// How long a stopping manager waits for its elector to resign.
const RESIGN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The running layers, in start order. Dropping them aborts every task.
struct Layers {
    signals: Group,
    http: Group,
    tasks: Group,
    informers: Group,
    election: Group,
    controllers: Group,
}

impl Layers {
    /// The next task of any layer (but the signal watcher) to end.
    async fn next_exit(&mut self) -> (String, Exit) {
        tokio::select! {
            exit = self.http.next_exit() => exit,
            exit = self.tasks.next_exit() => exit,
            exit = self.informers.next_exit() => exit,
            exit = self.election.next_exit() => exit,
            exit = self.controllers.next_exit() => exit,
        }
    }

    /// Waits for `future` unless a stop is requested or a task fails first.
    async fn until<T>(
        &mut self,
        stop: &CancellationToken,
        future: impl Future<Output = T>,
    ) -> Result<T, Exit> {
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return Err(Ok(())),
                (name, exit) = self.next_exit() => match exit {
                    Ok(()) => tracing::debug!(task = %name, "task finished"),
                    Err(error) => return Err(Err(error)),
                },
                value = &mut future => return Ok(value),
            }
        }
    }

    async fn abort_all(&mut self) {
        self.controllers.abort().await;
        self.election.abort().await;
        self.informers.abort().await;
        self.tasks.abort().await;
        self.http.abort().await;
    }
}

/// What the leadership watcher does the moment leadership is lost.
struct Leadership {
    elector: Arc<dyn LeaderElector>,
    fencing: Arc<Mutex<Option<u64>>>,
    queues: Vec<Arc<dyn QueueView>>,
    abort: CancellationToken,
    status: Arc<Status>,
    metrics: Metrics,
}

impl Leadership {
    fn set(&self, token: Option<u64>) {
        *self.fencing.lock() = token;
        self.status.leader.store(token.is_some(), Ordering::Release);
        self.metrics
            .set_leader(self.elector.name(), token.is_some());
    }

    /// Waits for the loss, then stops every reconcile at once.
    async fn watch(self, cancel: CancellationToken) -> Exit {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = self.elector.lost() => {}
        }
        tracing::error!(
            election = self.elector.name(),
            "lost the leadership, cancelling reconciles"
        );
        // No reconcile may start from here on: shut the queues, cancel the
        // running ones, and only then clear the token (a reconcile started
        // in between would run without one).
        for queue in &self.queues {
            queue.shutdown();
        }
        self.abort.cancel();
        self.set(None);
        Err(ManagerError::LostLeadership {
            election: self.elector.name().to_owned(),
        })
    }
}

impl Manager {
    /// Runs everything until shutdown (see the [module docs](crate::manager) for the
    /// order).
    ///
    /// # Errors
    ///
    /// `Ok(())` after a clean shutdown. Otherwise the first cause of the
    /// stop: [`ManagerError::CacheSync`] (naming the informer),
    /// [`ManagerError::LostLeadership`], [`ManagerError::TaskFailed`],
    /// [`ManagerError::Controller`], [`ManagerError::Informer`],
    /// [`ManagerError::Election`], [`ManagerError::Signals`] or
    /// [`ManagerError::Http`]; and, when the stop itself was cut short,
    /// [`ManagerError::ShutdownTimeout`] or [`ManagerError::ForcedShutdown`].
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
        let mut layers = Layers {
            signals: Group::new(),
            http: Group::new(),
            tasks: Group::new(),
            informers: Group::new(),
            election: Group::new(),
            controllers: Group::new(),
        };
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
        let cause = self.start(&mut layers, &status, &stop, &abort).await;
        if let Err(error) = &cause {
            status.set_failed(error.to_string());
        }
        let stopped = self.stop(&mut layers, &status, &force, &abort).await;
        layers.signals.abort().await;
        cause.and(stopped)
    }

    fn status(&self) -> Status {
        Status {
            informers: self.informers.clone(),
            controllers: self
                .controllers
                .iter()
                .map(|c| ControllerView {
                    name: c.name().to_owned(),
                    queue: c.queue(),
                    reconcile_timeout: c.reconcile_timeout(),
                })
                .collect(),
            stalls: self.config.stalls,
            elected: self.elector.is_some(),
            sharding: self.sharding.clone(),
            standby_ready: self.config.standby_ready,
            leader: AtomicBool::new(false),
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

    fn start_tasks(&mut self, layers: &mut Layers) {
        for (name, task) in self.tasks.drain(..) {
            let run = task(layers.tasks.token());
            let task = name.clone();
            layers.tasks.spawn(name, async move {
                run.await
                    .map_err(|source| ManagerError::TaskFailed { task, source })
            });
        }
    }

    fn start_informers(&self, layers: &mut Layers) {
        for (name, informer) in &self.informers {
            let run = informer.run(layers.informers.token());
            let informer = name.clone();
            layers
                .informers
                .spawn(format!("informer {name}"), async move {
                    run.await
                        .map_err(|source| ManagerError::Informer { informer, source })
                });
        }
    }

    /// Waits for the caches, wins the election, starts the controllers and
    /// waits for a stop; returns why it stopped.
    async fn start(
        &mut self,
        layers: &mut Layers,
        status: &Arc<Status>,
        stop: &CancellationToken,
        abort: &CancellationToken,
    ) -> Exit {
        let synced = wait_synced(&self.informers, self.config.sync_timeout);
        match layers.until(stop, synced).await {
            Ok(synced) => synced?,
            Err(cause) => return cause,
        }
        tracing::info!(informers = self.informers.len(), "caches synced");
        if let Some(elector) = self.elector.clone() {
            let token = match layers.until(stop, elector.campaign()).await {
                Ok(won) => won.map_err(ManagerError::Election)?,
                Err(cause) => return cause,
            };
            tracing::info!(election = elector.name(), token, "leading");
            let leadership = Leadership {
                elector,
                fencing: Arc::clone(&self.fencing),
                queues: status
                    .controllers
                    .iter()
                    .map(|c| Arc::clone(&c.queue))
                    .collect(),
                abort: abort.clone(),
                status: Arc::clone(status),
                metrics: self.metrics.clone(),
            };
            leadership.set(Some(token));
            let watch = leadership.watch(layers.election.token());
            layers.election.spawn("leader election", watch);
        }
        if let Err(cause) = self.start_sharding(layers, status, stop, abort).await {
            return cause;
        }
        for controller in self.controllers.drain(..) {
            let name = controller.name().to_owned();
            let run = controller.start(layers.controllers.token(), abort.clone());
            let controller = name.clone();
            layers.controllers.spawn(name, async move {
                run.await
                    .map_err(|source| ManagerError::Controller { controller, source })
            });
        }
        match layers.until(stop, std::future::pending::<()>()).await {
            Ok(()) => Ok(()),
            Err(cause) => cause,
        }
    }

    /// Joins the membership and starts following it (when sharded).
    async fn start_sharding(
        &mut self,
        layers: &mut Layers,
        status: &Status,
        stop: &CancellationToken,
        abort: &CancellationToken,
    ) -> Result<(), Exit> {
        let Some(sharding) = self.sharding.clone() else {
            return Ok(());
        };
        match layers.until(stop, sharding.membership.join()).await {
            Ok(joined) => joined.map_err(|error| Err(ManagerError::Membership(error)))?,
            Err(cause) => return Err(cause),
        }
        *sharding.joined.lock() = Some(Instant::now());
        tracing::info!(group = sharding.group(), member = %sharding.membership.id(), "joined");
        let queues = status
            .controllers
            .iter()
            .map(|c| Arc::clone(&c.queue))
            .collect();
        let feeds = std::mem::take(&mut self.feeds);
        let ownership =
            Ownership::new(sharding, feeds, queues, abort.clone(), self.metrics.clone());
        layers
            .election
            .spawn("sharding", ownership.run(layers.election.token()));
        Ok(())
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
            let orderly = self.stop_in_order(layers, status);
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

    async fn stop_in_order(&mut self, layers: &mut Layers, status: &Status) -> Exit {
        let mut first = layers.controllers.stop().await;
        // The sharding task gives its shards up and leaves here.
        let followed = layers.election.stop().await;
        if self.sharding.is_some() && first.is_ok() {
            first = followed;
        }
        if let Some(elector) = &self.elector {
            if status.leader.swap(false, Ordering::AcqRel) {
                *self.fencing.lock() = None;
                self.metrics.set_leader(elector.name(), false);
            }
            // Also after a lost leadership or as a standby: withdraw the
            // candidacy, so that a lease still renewing keeps no one out.
            // Bounded, as the elector's backend may be what failed.
            match tokio::time::timeout(RESIGN_TIMEOUT, elector.resign()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "resigning the leadership failed"),
                Err(_) => {
                    tracing::warn!(timeout = ?RESIGN_TIMEOUT, "resigning the leadership timed out");
                }
            }
        }
        for group in [&mut layers.tasks, &mut layers.informers, &mut layers.http] {
            let stopped = group.stop().await;
            if first.is_ok() {
                first = stopped;
            }
        }
        first
    }
}

/// Waits until every informer has synced, within one overall timeout.
async fn wait_synced(
    informers: &[(String, Arc<dyn SharedInformer>)],
    timeout: std::time::Duration,
) -> Exit {
    let deadline = crate::time::deadline(Instant::now(), timeout);
    for (name, informer) in informers {
        let left = deadline.saturating_duration_since(Instant::now());
        informer
            .wait_synced(left)
            .await
            .map_err(|source| ManagerError::CacheSync {
                informer: name.clone(),
                source,
            })?;
    }
    Ok(())
}
