//! The controller: observe → compare → act, forever.
//!
//! A [`Controller`] wires one primary [`Informer`] (the desired objects),
//! any number of secondary informers mapped to primary keys (`owns`,
//! `watches`), a [`WorkQueue`] and a pool of workers around your
//! [`Reconciler`]:
//!
//! 1. Informer events become keys in the queue (initial lists and resyncs at
//!    a background priority, fresh changes first), filtered by predicates.
//! 2. Once every cache has synced, workers take keys, read the *current*
//!    object from the cache and reconcile. A key is never reconciled by two
//!    workers at once; changes during a reconcile queue it once more.
//! 3. The outcome decides what follows: nothing, a requeue after a delay, a
//!    retry with per-key exponential backoff, or (terminal errors) nothing
//!    until the next change. Panics and timeouts are caught, counted and
//!    retried; workers live on.
//!
//! Informers are not run by the controller: they may be shared by several
//! controllers (the manager runs each once). Run them beside the controller.
//!
//! # Shutdown
//!
//! When the token passed to [`run`](Controller::run) is cancelled, no new
//! reconcile starts, in-flight ones get the grace period, then are cancelled;
//! `run` returns once every task it spawned has stopped.

mod builder;
mod context;
mod departed;
mod external;
mod gate;
mod last_states;
mod observer;
mod predicate;
mod reconciler;
mod scope;
mod shards;
mod trigger;
mod watch;
mod worker;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use self::builder::{ControllerBuilder, DEBOUNCE_WINDOWS};
pub use self::context::Context;
pub use self::observer::{ControllerObserver, Outcome};
pub use self::predicate::Predicate;
pub use self::reconciler::{Action, ErrorPolicy, Reconciler};
pub use self::trigger::{Trigger, Triggers};
pub use self::watch::Watch;

use self::builder::{Config, Inputs};
use self::context::Caches;
use self::departed::Departed;
use self::gate::Gate;
use self::last_states::LastStates;
pub(crate) use self::shards::{KeyShards, Owned};
use self::watch::{Enqueue, Synced, subscribe_primary};
use self::worker::Worker;
use crate::informer::{Informer, InformerError};
use crate::queue::WorkQueue;
use crate::source::Object;

/// Why a controller could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// The builder was given a setting that cannot work.
    #[error("controller `{controller}` is misconfigured: {reason}")]
    InvalidConfig {
        /// The controller's name.
        controller: String,
        /// What is wrong.
        reason: String,
    },
    /// A cache the controller needs did not sync in time.
    #[error("controller `{controller}` cannot start")]
    CacheSync {
        /// The controller's name.
        controller: String,
        /// Which source did not sync, and after how long.
        #[source]
        source: InformerError,
    },
}

/// A reconciliation loop for objects of type `O`, driven by reconciler `R`.
/// Build one with [`Controller::builder`], then [`run`](Controller::run) it.
///
/// # Examples
///
/// A controller that turns every light on, run beside its informer until
/// the hall's light is on:
///
/// ```
/// # use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)]
/// # struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// use std::convert::Infallible;
/// use tend::client::Client;
/// use tend::controller::{Action, Context, Controller, Reconciler};
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Informer};
///
/// struct On(Client<Light>);
/// impl Reconciler<Light> for On {
///     type Error = Infallible;
///     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Infallible> {
///         if let Some(light) = ctx.object().filter(|l| !l.on) {
///             // A conflict is harmless: the change that caused it queues the key again.
///             let _ = self.0.update(Light { on: true, ..Light::clone(light) }).await;
///         }
///         Ok(Action::Done)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// let informer = Informer::builder(store.clone()).build()?;
/// let controller = Controller::builder("on", &informer, On(store.client())).build()?;
///
/// let stop = CancellationToken::new();
/// let watching = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// let running = tokio::spawn(controller.run(stop.clone()));
/// store.client().create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
/// let lit = async {
///     while !store.get(&"hall".to_owned()).is_some_and(|l| l.on) {
///         tokio::task::yield_now().await;
///     }
/// };
/// tokio::time::timeout(std::time::Duration::from_secs(10), lit).await?;
/// stop.cancel(); // in-flight reconciles finish, then `run` returns
/// running.await??;
/// watching.await??;
/// # Ok(()) }
/// ```
pub struct Controller<O: Object, R> {
    name: String,
    inputs: Inputs<O>,
    reconciler: R,
    queue: WorkQueue<O::Key, Triggers>,
    config: Config,
    observer: Arc<dyn ControllerObserver>,
    fencing_token: Option<Arc<dyn Fn() -> Option<u64> + Send + Sync>>,
    abort: Option<CancellationToken>,
    shards: Option<KeyShards<O::Key>>,
    /// Deleted primary objects' last states, until their key reconciles.
    last_states: Arc<LastStates<O>>,
    /// Sharded: recent deletions of every shard's keys, for shards gained.
    departed: Arc<Departed<O>>,
}

/// Queues every cached primary key of the given shards (a sharded
/// controller's keys, once their shard is acquired).
pub(crate) type ShardFeed = Arc<dyn Fn(&[crate::shard::Shard]) + Send + Sync>;

impl<O: Object, R: Reconciler<O>> Controller<O, R> {
    /// Starts configuring a controller named `name` (used in logs and
    /// metrics) that reconciles the objects of `primary` with `reconciler`.
    pub fn builder(
        name: impl Into<String>,
        primary: impl Into<Watch<O>>,
        reconciler: R,
    ) -> ControllerBuilder<O, R> {
        ControllerBuilder::new(name.into(), primary.into(), reconciler)
    }

    fn assemble(
        name: String,
        inputs: Inputs<O>,
        reconciler: R,
        queue: WorkQueue<O::Key, Triggers>,
        config: Config,
        observer: Arc<dyn ControllerObserver>,
    ) -> Self {
        Self {
            name,
            inputs,
            reconciler,
            queue,
            config,
            observer,
            fencing_token: None,
            abort: None,
            shards: None,
            last_states: Arc::new(LastStates::new()),
            departed: Arc::new(Departed::new()),
        }
    }

    /// The controller's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle to the controller's work queue: its
    /// [`stats`](WorkQueue::stats) and [`in_flight`](WorkQueue::in_flight)
    /// keys ("which key is stuck"). Each key carries the [`Triggers`] of its
    /// next reconcile: a key added here with [`add`](WorkQueue::add) has
    /// none, one [`enqueue`](WorkQueue::enqueue)d with some reports them.
    #[must_use]
    pub fn queue(&self) -> WorkQueue<O::Key, Triggers> {
        self.queue.clone()
    }

    /// The primary informer.
    #[must_use]
    pub fn primary(&self) -> &Informer<O> {
        self.inputs.primary.informer()
    }

    /// Lowers the shutdown grace to at most `max` (the manager's own bound).
    pub(crate) fn cap_shutdown_grace(&mut self, max: Duration) {
        self.config.shutdown_grace = self.config.shutdown_grace.min(max);
    }

    /// Where reconciles get their [`Context::fencing_token`] (set by the
    /// manager under leader election).
    pub(crate) fn set_fencing_token(&mut self, token: Arc<dyn Fn() -> Option<u64> + Send + Sync>) {
        self.fencing_token = Some(token);
    }

    /// A token that, when cancelled, cancels in-flight reconciles at once,
    /// without the grace period (the manager's lost leadership).
    pub(crate) fn set_abort(&mut self, abort: CancellationToken) {
        self.abort = Some(abort);
    }

    /// Reconciles only keys of the shards `shards` says this replica owns,
    /// each with its shard's token (set by the manager's sharding).
    pub(crate) fn set_shards(&mut self, shards: KeyShards<O::Key>) {
        self.shards = Some(shards);
    }

    /// Queues the cached keys of shards just acquired, and the keys of
    /// theirs deleted recently (with their last states: see `departed`),
    /// at the background priority (`Trigger::Acquired`); usable before and
    /// while running.
    pub(crate) fn shard_feed(&self) -> ShardFeed {
        let sink = self.sink();
        let store = self.inputs.primary.informer().store();
        let (departed, last_states) = (Arc::clone(&self.departed), Arc::clone(&self.last_states));
        Arc::new(move |gained| {
            let Some(shards) = &sink.shards else { return };
            let mut wanted = vec![false; shards.owned.count().shards().len()];
            for shard in gained {
                if let Some(slot) = usize::try_from(shard.index())
                    .ok()
                    .and_then(|i| wanted.get_mut(i))
                {
                    *slot = true;
                }
            }
            let keep = |key: &O::Key| {
                let shard = shards.shard(key).index();
                usize::try_from(shard).is_ok_and(|i| wanted.get(i) == Some(&true))
            };
            external::enqueue_where(&sink, &store, Trigger::Acquired, keep);
            let exists = |key: &O::Key| store.get(key).is_some();
            let gone = departed.take_where(keep, exists, |key, last| {
                last_states.deleted(key.clone(), last);
            });
            external::enqueue_keys(&sink, gone, Trigger::Acquired);
        })
    }

    fn sink(&self) -> Enqueue<O::Key> {
        Enqueue {
            queue: self.queue.clone(),
            background: self.config.background,
            shards: self.shards.clone(),
        }
    }

    /// How many keys are reconciled at once.
    pub(crate) fn concurrency(&self) -> std::num::NonZeroUsize {
        self.config.concurrency
    }

    /// How long a reconcile may run before it is cancelled (`None`: forever).
    pub(crate) fn reconcile_timeout(&self) -> Option<Duration> {
        self.config.reconcile_timeout
    }

    /// Runs the loop until `shutdown` is cancelled.
    ///
    /// Subscribes to every informer, waits until their caches (and this
    /// controller's replay of them) are synced, then reconciles with the
    /// configured number of workers. The informers themselves must be
    /// running (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ControllerError::CacheSync`] when a cache did not sync within the
    /// sync timeout; nothing was reconciled then.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the workers' tasks (a `JoinSet` owns them)
    /// without the grace period: cancel `shutdown` and await `run` instead.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), ControllerError> {
        let sink = self.sink();
        let last_states = Arc::clone(&self.last_states);
        let (caches, subscriptions) = self.subscribe(&sink, &last_states);
        tokio::select! {
            // Not `&self`: the streams of `reconcile_on` need not be `Sync`.
            synced = wait_synced(&self.name, self.config.sync_timeout, &subscriptions) => synced?,
            () = shutdown.cancelled() => return Ok(()),
        }
        tracing::info!(controller = %self.name, workers = self.config.concurrency, "caches synced, starting workers");
        let externals = std::mem::take(&mut self.inputs.externals);
        let store = self.inputs.primary.informer().store();
        let worker = Arc::new(Worker {
            name: self.name,
            store: store.clone(),
            reconciler: self.reconciler,
            sink: sink.clone(),
            caches: Arc::new(caches),
            timeout: self.config.reconcile_timeout,
            observer: self.observer,
            fencing_token: self.fencing_token,
            workers: self.config.concurrency.get(),
            gate: self.config.read_your_writes.map(Gate::new),
            last_states,
        });
        let hard_stop = self
            .abort
            .as_ref()
            .map_or_else(CancellationToken::new, CancellationToken::child_token);
        // Reconciles' tokens are its children: all are cancelled once the
        // controller stops, however `run` ends (see `Context::cancelled`).
        let _stopped = hard_stop.clone().drop_guard();
        let mut tasks = JoinSet::new();
        for _ in 0..self.config.concurrency.get() {
            tasks.spawn(Arc::clone(&worker).run(hard_stop.clone()));
        }
        if let Some(period) = self.config.resync {
            tasks.spawn(Arc::clone(&worker).resync_every(period, shutdown.clone()));
        }
        for external in externals {
            tasks.spawn(external.feed(sink.clone(), store.clone(), shutdown.clone()));
        }
        // Ends the keys held for their writes; stops after the workers.
        let gated = CancellationToken::new();
        let mut gate = JoinSet::new();
        if worker.gate.is_some() {
            gate.spawn(Arc::clone(&worker).watch_writes(gated.clone()));
        }
        shutdown.cancelled().await;
        self.queue.shutdown();
        let grace = self.config.shutdown_grace;
        drain(&mut tasks, grace, &hard_stop, &worker.name).await;
        gated.cancel();
        join_all(&mut gate).await;
        drop(subscriptions);
        Ok(())
    }

    /// Subscribes to every informer: the caches reconciles read, and the
    /// subscriptions that feed the queue (dropping one unsubscribes).
    fn subscribe(
        &self,
        sink: &Enqueue<O::Key>,
        last_states: &Arc<LastStates<O>>,
    ) -> (Caches, Vec<Box<dyn Synced>>) {
        let mut caches = Caches::default();
        caches.push(self.inputs.primary.informer().store());
        caches.set_clients(self.config.clients.clone());
        let departed = self.shards.is_some().then(|| Arc::clone(&self.departed));
        let mut subscriptions = vec![subscribe_primary(
            &self.inputs.primary,
            sink.clone(),
            (Arc::clone(last_states), departed),
        )];
        for secondary in &self.inputs.secondaries {
            secondary.add_cache(&mut caches);
            subscriptions.push(secondary.subscribe(sink.clone()));
        }
        (caches, subscriptions)
    }
}

/// Waits for every subscription of controller `name`, all within one sync
/// timeout.
async fn wait_synced(
    name: &str,
    timeout: Duration,
    subscriptions: &[Box<dyn Synced>],
) -> Result<(), ControllerError> {
    let start = tokio::time::Instant::now();
    for subscription in subscriptions {
        let left = timeout.saturating_sub(start.elapsed());
        subscription
            .wait_synced(left)
            .await
            .map_err(|source| ControllerError::CacheSync {
                controller: name.to_owned(),
                source,
            })?;
    }
    Ok(())
}

/// Waits `grace` for the workers of controller `name` to finish, then
/// cancels the reconciles still running and waits for them.
async fn drain(
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
async fn join_all(tasks: &mut JoinSet<()>) {
    while let Some(result) = tasks.join_next().await {
        if let Err(error) = result {
            tracing::error!(%error, "controller task failed");
        }
    }
}

impl<O: Object, R> fmt::Debug for Controller<O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("primary", &self.inputs.primary)
            .field("secondaries", &self.inputs.secondaries.len())
            .field("externals", &self.inputs.externals.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
