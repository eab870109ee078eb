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
mod call;
mod context;
mod departed;
mod environment;
mod error;
mod external;
mod feed;
mod finalizer;
mod footprint;
mod gate;
mod hot_keys;
mod journal;
mod key_groups;
mod lag_gate;
mod last_states;
mod observer;
mod ownership;
mod pace;
mod predicate;
mod reads;
mod reconciler;
mod scope;
mod settle;
mod sink;
mod spacer;
mod tasks;
mod trigger;
mod unsure;
mod watch;
mod worker;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use self::builder::{ControllerBuilder, DEBOUNCE_WINDOWS};
pub use self::context::Context;
pub use self::environment::Environment;
pub use self::error::{ControllerError, ControllerSetting};
pub use self::finalizer::{Finalize, FinalizerError, finalizer};
pub use self::footprint::{Footprint, TableSizes};
pub(crate) use self::hot_keys::describe as describe_woken_by;
pub use self::hot_keys::{HotKey, HotKeyPolicy, HotKeys};
pub use self::journal::{Journal, JournalTotals, Reconciled};
pub use self::key_groups::MAX_GROUP_METRICS;
pub use self::observer::{ControllerObserver, Outcome};
pub use self::ownership::Ownership;
pub use self::predicate::Predicate;
pub use self::reads::ReadCause;
pub use self::reconciler::{Action, ErrorPolicy, Reconciler};
pub use self::trigger::{Trigger, Triggers};
pub use self::watch::Watch;

use self::builder::{Config, Inputs};
use self::context::Caches;
use self::departed::Departed;
use self::feed::Feed;
use self::footprint::{Counted, Table};
use self::gate::Gate;
use self::lag_gate::LagGate;
use self::last_states::LastStates;
pub(crate) use self::ownership::{LoseAllOnDrop, Slots};
use self::reads::Tracker;
use self::sink::Enqueue;
use self::spacer::Spacer;
use self::tasks::{drain, hard_stop_of, join_all, spawn_gate, spawn_workers};
use self::watch::{Deletions, Synced, subscribe_primary};
use self::worker::Worker;
use crate::error::SettingError;
use crate::informer::{Informer, InformerId};
use crate::object::Object;
use crate::queue::WorkQueue;

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
    /// Deleted primary objects' last states, until their key reconciles.
    last_states: Arc<LastStates<O>>,
    journal: Journal<O::Key>,
    hot_keys: HotKeys<O::Key>,
    footprint: Footprint<O::Key>,
}

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
        let hot_keys = HotKeys::new(&name, config.hot_keys);
        let last_states = Arc::new(LastStates::new());
        let footprint = Footprint::new(
            queue.clone(),
            hot_keys.clone(),
            Arc::clone(&last_states) as Arc<dyn Counted>,
        );
        Self {
            name,
            inputs,
            reconciler,
            queue,
            config,
            observer,
            last_states,
            journal: Journal::default(),
            hot_keys,
            footprint,
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

    /// A handle to the controller's [`Journal`]: its last reconciles and
    /// failures, kept while it runs (and after).
    #[must_use]
    pub fn journal(&self) -> Journal<O::Key> {
        self.journal.clone()
    }

    /// A handle to the controller's [`HotKeys`]: the keys reconciled again
    /// and again with a write each time (see [`ControllerBuilder::hot_keys`]).
    #[must_use]
    pub fn hot_keys(&self) -> HotKeys<O::Key> {
        self.hot_keys.clone()
    }

    /// A handle on the sizes of the controller's per-key tables (the
    /// queue, the rate limiter's failures, deleted objects' last states,
    /// keys held for their writes, …): what a leak check watches. See
    /// [`Footprint`].
    #[must_use]
    pub fn footprint(&self) -> Footprint<O::Key> {
        self.footprint.clone()
    }

    /// The primary informer.
    #[must_use]
    pub fn primary(&self) -> &Informer<O> {
        self.inputs.primary.informer()
    }

    /// Every informer this controller reads (primary first), each once:
    /// the ones that must run for it to work.
    #[must_use]
    pub fn informers(&self) -> Vec<InformerId> {
        let mut ids = vec![self.inputs.primary.informer().id()];
        for secondary in &self.inputs.secondaries {
            let id = secondary.informer_id();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The informers this controller waits for before it reconciles: all
    /// of [`informers`](Self::informers) but its
    /// [optional](Watch::optional) sources.
    #[must_use]
    pub fn required_informers(&self) -> Vec<InformerId> {
        let mut ids = vec![self.inputs.primary.informer().id()];
        for secondary in self.inputs.secondaries.iter().filter(|s| !s.optional()) {
            let id = secondary.informer_id();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// How many keys are reconciled at once.
    #[must_use]
    pub fn concurrency(&self) -> NonZeroUsize {
        self.config.concurrency
    }

    /// How long a reconcile may run before it is cancelled (`None`: forever).
    #[must_use]
    pub fn reconcile_timeout(&self) -> Option<Duration> {
        self.config.reconcile_timeout
    }

    /// The object types of the clients given to the builder
    /// ([`ControllerBuilder::client`]) that have no fencing authority: a
    /// controller run under an [`Ownership`] refuses to start with any.
    #[must_use]
    pub fn unfenced_clients(&self) -> Vec<&'static str> {
        self.config.clients.unfenced()
    }

    /// Runs the loop until `shutdown` is cancelled: [`run_in`](Self::run_in)
    /// an [`Environment::new`] of it (every key, no fencing token).
    ///
    /// # Errors
    ///
    /// [`ControllerError::Informer`] when a cache did not sync within the
    /// sync timeout; nothing was reconciled then.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the workers' tasks (a `JoinSet` owns them)
    /// without the grace period: cancel `shutdown` and await `run` instead.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllerError> {
        self.run_in(Environment::new(shutdown)).await
    }

    /// Runs the loop in `env` until its stop token is cancelled.
    ///
    /// Subscribes to every informer, waits until their caches (and this
    /// controller's replay of them) are synced, then reconciles with the
    /// configured number of workers: every key, or (under an
    /// [`Ownership`]) the keys it owns now, each with its fencing token.
    /// The informers themselves must be running (see the
    /// [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ControllerError::Informer`] when a cache did not sync within the
    /// sync timeout (nothing was reconciled then);
    /// [`ControllerError::UnfencedClient`] under an ownership with a client
    /// that cannot be fenced; [`ControllerError::InvalidConfig`] for a zero
    /// sync timeout in `env`.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    pub async fn run_in(self, env: Environment<O::Key>) -> Result<(), ControllerError> {
        self.check(&env)?;
        let sink = Enqueue {
            queue: self.queue.clone(),
            background: self.config.background,
            ownership: env.ownership.clone(),
        };
        // Before subscribing: a slot gained after this is fed, one gained
        // before is in the subscriptions' replay.
        let gains = env
            .ownership
            .as_ref()
            .filter(|o| o.skips())
            .map(|o| o.gains());
        let departed = gains.as_ref().map(|_| Arc::new(Departed::new()));
        if let Some(departed) = &departed {
            let counted = Arc::clone(departed) as Arc<dyn Counted>;
            self.footprint.register(Table::Departed, counted);
        }
        let (caches, subscriptions) = self.subscribe(&sink, departed.clone());
        let sync_timeout = env.sync_timeout.unwrap_or(self.config.sync_timeout);
        tokio::select! {
            // Not `&self`: the streams of `reconcile_on` need not be `Sync`.
            synced = wait_synced(&self.name, sync_timeout, &subscriptions) => synced?,
            () = env.stop.cancelled() => return Ok(()),
        }
        tracing::info!(controller = %self.name, workers = self.config.concurrency, "caches synced, starting workers");
        let feed =
            gains
                .zip(departed)
                .zip(env.ownership.clone())
                .map(|((gains, departed), ownership)| Feed {
                    sink: sink.clone(),
                    store: self.inputs.primary.informer().cache(),
                    departed,
                    last_states: Arc::clone(&self.last_states),
                    gains,
                    ownership,
                });
        self.serve(env, sink, caches, feed).await;
        drop(subscriptions);
        Ok(())
    }

    /// Reconciles until `env`'s stop, then shuts down within the grace.
    async fn serve(
        self,
        env: Environment<O::Key>,
        sink: Enqueue<O::Key>,
        caches: Caches,
        feed: Option<Feed<O>>,
    ) {
        let stopping = env.stop.clone();
        let (worker, mut inputs, config) = self.into_worker(&sink, caches, stopping);
        let grace = env
            .max_grace
            .map_or(config.shutdown_grace, |max| config.shutdown_grace.min(max));
        let store = worker.store.clone();
        let hard_stop = hard_stop_of(&env);
        // Reconciles' tokens are its children: all are cancelled once the
        // controller stops, however `run` ends (see `Context::cancelled`).
        let _stopped = hard_stop.clone().drop_guard();
        let mut tasks = spawn_workers(&worker, &hard_stop, config.resync);
        for external in std::mem::take(&mut inputs.externals) {
            tasks.spawn(external.feed(sink.clone(), store.clone(), env.stop.clone()));
        }
        if let Some(feed) = feed {
            tasks.spawn(feed.run(env.stop.clone()));
        }
        let (gated, mut gate) = spawn_gate(&worker);
        // The abort token ends the workers at once: the run ends then too.
        tokio::select! {
            () = env.stop.cancelled() => {}
            () = hard_stop.cancelled() => {}
        }
        sink.queue.shutdown();
        drain(&mut tasks, grace, &hard_stop, &worker.name).await;
        gated.cancel();
        join_all(&mut gate).await;
    }

    /// The workers' shared state, and what `serve` keeps of the controller.
    fn into_worker(
        self,
        sink: &Enqueue<O::Key>,
        caches: Caches,
        stopping: CancellationToken,
    ) -> (Arc<Worker<O, R>>, Inputs<O>, Config) {
        let Self {
            name,
            inputs,
            reconciler,
            queue: _,
            config,
            observer,
            last_states,
            journal,
            hot_keys,
            footprint,
        } = self;
        let lag_gate = LagGate::of(&name, &inputs, config.lag_hold);
        let gate = config
            .read_your_writes
            .map(|bound| Arc::new(Gate::new(bound)));
        let spacer = config
            .hot_keys
            .and_then(|p| p.spacing())
            .map(|_| Arc::new(Spacer::new()));
        let reads = Tracker::of(&inputs.secondaries);
        register_run_tables(&footprint, gate.clone(), spacer.clone(), reads.clone());
        let worker = Arc::new(Worker {
            name,
            store: inputs.primary.informer().cache(),
            reconciler,
            sink: sink.clone(),
            caches: Arc::new(caches),
            timeout: config.reconcile_timeout,
            max_retry_after: config.max_retry_after,
            observer,
            workers: config.concurrency.get(),
            gate,
            last_states,
            journal,
            lag_gate,
            spacer,
            reads,
            hot_keys,
            stopping,
        });
        (worker, inputs, config)
    }

    /// Refuses an environment this controller cannot run in.
    fn check(&self, env: &Environment<O::Key>) -> Result<(), ControllerError> {
        if env.sync_timeout.is_some_and(|timeout| timeout.is_zero()) {
            return Err(ControllerError::InvalidConfig {
                controller: self.name.clone(),
                setting: ControllerSetting::SyncTimeout,
                error: SettingError::Zero,
            });
        }
        match self.unfenced_clients().first() {
            Some(&object_type) if env.ownership.is_some() => Err(ControllerError::UnfencedClient {
                controller: self.name.clone(),
                object_type,
            }),
            _ => Ok(()),
        }
    }

    /// Subscribes to every informer: the caches reconciles read, and the
    /// subscriptions that feed the queue (dropping one unsubscribes).
    fn subscribe(
        &self,
        sink: &Enqueue<O::Key>,
        departed: Option<Arc<Departed<O>>>,
    ) -> (Caches, Vec<Box<dyn Synced>>) {
        let mut caches = Caches::default();
        caches.push(self.inputs.primary.informer().cache(), false);
        caches.set_clients(self.config.clients.clone());
        let deletions = Deletions {
            last_states: Arc::clone(&self.last_states),
            departed,
            reads: Tracker::of(&self.inputs.secondaries),
        };
        let mut subscriptions = vec![subscribe_primary(
            &self.inputs.primary,
            sink.clone(),
            deletions,
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
    for subscription in subscriptions.iter().filter(|s| !s.optional()) {
        let left = timeout.saturating_sub(start.elapsed());
        subscription
            .wait_synced(left)
            .await
            .map_err(|source| ControllerError::Informer {
                controller: name.to_owned(),
                source,
            })?;
    }
    Ok(())
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

/// Counts the tables a run made in `footprint`.
fn register_run_tables<K: crate::QueueKey>(
    footprint: &Footprint<K>,
    gate: Option<Arc<Gate<K>>>,
    spacer: Option<Arc<Spacer<K>>>,
    reads: Option<Tracker<K>>,
) {
    if let Some(gate) = gate {
        footprint.register(Table::AwaitingWrites, gate);
    }
    if let Some(spacer) = spacer {
        footprint.register(Table::Spaced, spacer);
    }
    if let Some(reads) = reads {
        footprint.register(Table::TrackedReads, Arc::new(reads));
    }
}
