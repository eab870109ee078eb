//! The manager: several controllers, shared informers, metrics, health
//! endpoints, leader election and clean start and stop in one process.
//!
//! A [`Manager`] is what an operator's `main` runs. Register informers
//! through it (one per source, shared by every controller that watches the
//! source: one list, one watch, one cache), controllers (built with
//! [`Manager::controller`] so that their metrics are wired) and plain
//! long-running tasks, then [`run`](Manager::run) it.
//!
//! # Start and stop
//!
//! `run` starts, in order: the HTTP server and the plain tasks → the
//! informers → the controllers (each waits for its own caches, then
//! reconciles what its [`Placement`] allows) → once every cache has synced
//! (or the sync timeout has passed), the leader election and the shard
//! membership. On SIGTERM or SIGINT (or [`Manager::shutdown_token`]) it
//! stops them in the reverse order, the whole shutdown bounded by a
//! graceful-shutdown timeout (default 30 s), after which the remaining
//! tasks are aborted. A second signal forces the shutdown at once. `run`
//! returns only when every task it started has stopped.
//!
//! # Placement
//!
//! Every controller and task says where it runs ([`Placement`]): on every
//! replica, only on the leader of the manager's election
//! ([`ManagerBuilder::leader_election`]), or, for controllers, sharded over
//! the members of its membership ([`ManagerBuilder::sharding`]). One manager
//! holds any mix: a sharded main controller beside a leader-only garbage
//! collector and a metrics exporter on every replica. A runnable placed
//! where the manager cannot put it (leader-only without an election,
//! sharded without a membership, a writing client that cannot be fenced) is
//! refused when it is registered.
//!
//! ```
//! # use std::convert::Infallible;
//! # use tend::controller::{Action, Context, Reconciler};
//! # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
//! # tend::impl_object!(Item, key: name: String, version: version);
//! # struct Noop;
//! # impl Reconciler<Item> for Noop {
//! #     type Error = Infallible;
//! #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> { Ok(Action::Done) }
//! # }
//! use tend::manager::Manager;
//! use tend::memory::MemoryElectionGroup;
//! use tend::memory::MemoryStore;
//! use tend::placement::Placement;
//! use tend::memory::MemoryMembershipGroup;
//! use tend::shard::ShardCount;
//! use tend::Informer;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let shards = ShardCount::new(64)?;
//! let group = MemoryMembershipGroup::new("items", shards);
//! let election = MemoryElectionGroup::new("items-gc");
//! let mut manager = Manager::builder()
//!     .sharding(group.member("replica-0"), shards)
//!     .leader_election(election.candidate())
//!     .without_signals()
//!     .build()?;
//! let store = MemoryStore::<Item>::new("items");
//! let items = manager.informer("items", || Informer::builder(store.clone()).build())?;
//! let main = manager.controller("items", &items, Noop).build()?;
//! manager.add_controller_on(main, Placement::Sharded)?;
//! let gc = manager.controller("items-gc", &items, Noop).build()?;
//! manager.add_controller_on(gc, Placement::Leader)?;
//! manager.add_task_on("exporter", Placement::Everywhere, |stop| async move {
//!     stop.cancelled().await;
//!     Ok(())
//! })?;
//! # Ok(()) }
//! ```
//!
//! # Leader election
//!
//! With a [`LeaderElector`](crate::election::LeaderElector), leader-only controllers run on every replica
//! as warm standbys: subscribed, their caches synced and their queues
//! filled, but no key handed out until this replica leads; a replica that
//! wins starts reconciling at once, with nothing to replay (a delete seen
//! while standing by is reconciled then, with its last state). Leader-only
//! tasks start when this replica wins. Reconcilers get the leader's fencing
//! token from [`Context::fencing_token`](crate::controller::Context::fencing_token).
//!
//! When the leadership is lost, no new leader-only reconcile starts,
//! in-flight ones are cancelled at once (no grace period: another replica
//! may already be acting on the same keys), leader-only tasks are
//! cancelled (with the grace), and `run` returns
//! [`ManagerError::LostLeadership`]. The process should then exit (and be
//! restarted by its supervisor): a deposed leader cannot know which of its
//! writes landed, and a fresh process starts from a clean state. With
//! [`ManagerBuilder::campaign_again`] it stands by and campaigns again
//! instead: its leader-only runnables start again, with the new token, when
//! it wins again.
//!
//! # Sharding
//!
//! With [`ManagerBuilder::sharding`] every replica runs, and the keys of the
//! sharded controllers are spread over the live members of a
//! [`Membership`](crate::shard::Membership) group: each replica reconciles
//! only the keys of the shards it owns, with the shard's fencing token (see
//! [`Sharding`]). A lost membership stops every sharded reconcile at once
//! and fails `run` with [`ManagerError::LostMembership`]; the process
//! should exit.
//!
//! # Caches that do not sync
//!
//! A controller starts once its own caches have synced: one informer that
//! cannot sync (a source that keeps failing, a custom resource whose
//! definition is not installed, a 403) holds back only the controllers that
//! read it, which `/readyz` names. By default they wait for as long as it
//! takes ([`UnsyncedCaches::Wait`]): the others keep working, and a
//! definition installed later is picked up without a restart, while
//! `/healthz` still fails once the source has kept failing past its stall
//! bound, so a process whose own connection is broken is restarted.
//! [`UnsyncedCaches::Fail`] fails `run` instead once the sync timeout has
//! passed, as controller-runtime does.
//!
//! # Metrics and endpoints
//!
//! Metrics use the names and labels of controller-runtime and client-go
//! (`controller_runtime_reconcile_total{controller,result}`,
//! `workqueue_depth{name,controller}`, `leader_election_master_status{name}`
//! …) plus `tend_informer_*{name}` for informers and `tend_controller_*`
//! for what controller-runtime does not have (keys reconciled before the
//! caches showed their writes, fenced writes refused), in a
//! [`prometheus_client`] registry that you can add your own metrics to
//! ([`Manager::registry_mut`]). Beyond controller-runtime's: how far each
//! informer's cache lags its source (`tend_informer_lag_revisions{name}`,
//! `tend_informer_lag_seconds{name}`, see [`CacheLag`](crate::CacheLag)),
//! the time from what woke a reconcile to its start
//! (`tend_controller_reconcile_latency_seconds{controller,trigger}`, see
//! [`ControllerObserver::reconcile_latency`](crate::controller::ControllerObserver::reconcile_latency))
//! and hot keys (`tend_controller_hot_key_episodes_total{controller}`, see
//! [`ControllerBuilder::hot_keys`](crate::controller::ControllerBuilder::hot_keys)).
//! With the `http` feature (on by default) and
//! [`ManagerBuilder::http_address`] set, the manager serves:
//!
//! | path | answer |
//! |---|---|
//! | `/`, `/status` | a live status page (its `status.js` and `status.css` beside it): each controller's queue, keys in flight (stuck ones flagged), last reconciles and errors; each informer; the election; the shards. Updated every second from `/status.json` |
//! | `/status.json` | JSON: what the page shows (see `docs/controllers.md` in the repository) |
//! | `/metrics` | the registry, in Prometheus text format 0.0.4 |
//! | `/healthz` | 200 while no task has failed and nothing is stuck (see [Health](#health)); 503 with one line per reason otherwise |
//! | `/readyz` | 200 once every cache has synced, while leading (or standing by, see [`ManagerBuilder::standby_is_ready`]), with sharding once the assigned shards are owned (or three handover timeouts after joining), not shutting down, and (with [`ManagerBuilder::not_ready_while_lagging`]) while no informer lags its source past the bound; 503 with the reasons otherwise, naming each informer and each controller not synced yet, and each informer lagging |
//! | `/debug/runnables` | JSON: every controller and task, its placement, and whether it is active on this replica now |
//! | `/debug/shards` | JSON, with sharding: the group, this member, the members it sees, the shards assigned to it and the shards it owns with their tokens (404 without sharding) |
//! | `/debug/queues` | JSON: per controller, queued, delayed and in-flight counts and the oldest in-flight keys (string keys as written, an [`ObjectKey`](crate::ObjectKey) as `namespace/name`, others in their `Debug` form) with their age in seconds |
//!
//! # Health
//!
//! `/healthz` is a liveness probe: when it fails, the process will not get
//! better by itself and the supervisor should restart it. Besides a failed
//! task, it fails (each on by default, set on the [`ManagerBuilder`]) while
//!
//! - **a controller holds a key far past its reconcile timeout**: longer
//!   than 3 × the timeout ([`ManagerBuilder::stuck_key_after_timeouts`]),
//!   or than an absolute bound if one is set
//!   ([`ManagerBuilder::stuck_key_after`]). The worker cancels a reconcile
//!   at its timeout, so such a key means the worker itself is wedged (a
//!   reconcile blocking its thread, a destructor that hangs). The line
//!   names the controller and its oldest stuck keys.
//! - **an informer's source has kept failing** for longer than 15 minutes
//!   ([`ManagerBuilder::stalled_informer_after`]): every list and watch
//!   since failed, and the informer made no progress (no list, change or
//!   bookmark). A quiet source is healthy. The line names the informer.
//!
//! ```text
//! controller `widgets` is stuck: 1 key held longer than 900s (reconcile timeout 300s): `web-1` for 912.5s;
//! informer `pods` is stalled: its source has been failing for 901.2s (bound 900s), last progress 3605s ago
//! ```
//!
//! [`ManagerBuilder::without_stall_checks`] keeps only the failed-task check.

mod activity;
mod builder;
// Without `http`, parts only the endpoints read are unused.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod erased;
mod error;
mod group;
mod handle;
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod health;
#[cfg(feature = "http")]
mod http;
mod informers;
mod leader_tasks;
mod live;
mod metrics;
#[cfg(feature = "http")]
mod page;
mod run;
mod runnable;
mod signals;
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod status;

use std::fmt;
use std::future::Future;
#[cfg(feature = "http")]
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::builder::{ManagerBuilder, UnsyncedCaches};
pub use self::error::{ManagerError, ManagerSetting};
pub use prometheus_client;

use self::activity::Activity;
pub use self::handle::ManagerHandle;
use self::handle::{Command, register_informer};
use self::informers::Informers;
use self::metrics::Metrics;
use self::runnable::{Placed, Placer, Task, TaskRun};
use self::signals::Signals;
use crate::controller::{Controller, ControllerBuilder, Reconciler, Watch};
use crate::error::BoxError;
use crate::informer::{Informer, InformerError};
use crate::object::Object;
use crate::placement::{Leadership, Placement, Sharding};
use crate::shard::ShardKey;

/// Runs controllers, shared informers and tasks; serves metrics and health.
/// See the [module docs](self).
///
/// # Examples
///
/// ```no_run
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # use tend::memory::MemoryStore;
/// # use tend::{Informer, Object, Revision};
/// # #[derive(Clone, Debug)] struct Widget { name: String, version: Revision }
/// # impl Object for Widget {
/// #     type Key = String;
/// #     fn key(&self) -> String { self.name.clone() }
/// #     fn version(&self) -> Revision { self.version }
/// #     fn set_version(&mut self, v: Revision) { self.version = v; }
/// # }
/// # struct Widgets;
/// # impl Reconciler<Widget> for Widgets {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Widget>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// use tend::manager::Manager;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::<Widget>::new("widgets");
/// let mut manager = Manager::builder()
///     .http_address("127.0.0.1:8080".parse()?)
///     .build()?;
/// let widgets = manager.informer("widgets", || Informer::builder(store.clone()).build())?;
/// let controller = manager.controller("widgets", &widgets, Widgets).build()?;
/// manager.add_controller(controller)?;
/// manager.run().await?; // until SIGTERM or SIGINT
/// # Ok(())
/// # }
/// ```
pub struct Manager {
    config: Config,
    registry: Registry,
    placer: Placer,
    informers: Arc<Informers>,
    controllers: Vec<Placed>,
    tasks: Vec<Task>,
    commands: mpsc::UnboundedSender<Command>,
    inbox: Option<mpsc::UnboundedReceiver<Command>>,
    signals: Signals,
    shutdown: CancellationToken,
    #[cfg(feature = "http")]
    listener: Option<std::net::TcpListener>,
}

/// The manager's settings, from its builder.
#[derive(Debug, Clone, Copy)]
struct Config {
    grace: Duration,
    sync_timeout: Duration,
    unsynced: UnsyncedCaches,
    standby_ready: bool,
    ready_lag: Option<Duration>,
    stalls: health::StallLimits,
}

impl Config {
    /// A controller's shutdown grace at most: a fifth of the manager's
    /// timeout is left to resign and stop the informers after the
    /// controllers.
    fn controller_grace(&self) -> Duration {
        self.grace.mul_f64(0.8)
    }
}

impl Manager {
    /// Starts configuring a manager.
    pub fn builder() -> ManagerBuilder {
        ManagerBuilder::new()
    }

    fn assemble(builder: ManagerBuilder) -> Result<Self, ManagerError> {
        let mut registry = builder.registry.unwrap_or_default();
        let metrics = Metrics::register(&mut registry);
        let activity = Arc::new(Activity::default());
        registry.register_collector(Box::new(Arc::clone(&activity)));
        #[cfg(feature = "http")]
        let listener = match builder.http_address {
            Some(address) => Some(bind(address).map_err(ManagerError::Http)?),
            None => None,
        };
        let leadership = builder.elector.map(|elector| {
            metrics.set_leader(elector.name(), false);
            Leadership::from_arc(elector).campaign_again(builder.campaign_again)
        });
        let sharding = builder.sharding.map(|(membership, shards)| {
            metrics.set_shards_owned(membership.group(), 0);
            Sharding::from_arc(membership, shards)
                .handover_timeout(builder.handover)
                .observer(Arc::new(metrics.clone()))
        });
        let (commands, inbox) = mpsc::unbounded_channel();
        Ok(Self {
            config: Config {
                grace: builder.grace,
                sync_timeout: builder.sync_timeout,
                unsynced: builder.unsynced,
                standby_ready: builder.standby_ready,
                ready_lag: builder.ready_lag,
                stalls: builder.stalls,
            },
            registry,
            placer: Placer {
                leadership,
                sharding,
                metrics,
                activity,
            },
            informers: Arc::default(),
            controllers: Vec::new(),
            tasks: Vec::new(),
            commands,
            inbox: Some(inbox),
            signals: builder.signals,
            shutdown: CancellationToken::new(),
            #[cfg(feature = "http")]
            listener,
        })
    }

    /// The informer registered as `name`, built with `make` the first time.
    ///
    /// Every controller that watches a source should get its informer here,
    /// under one name: they then share one list, one watch and one cache,
    /// and the manager runs it for as long as it runs (each controller
    /// waits for the caches it reads before it starts). An informer not
    /// registered here is never run.
    ///
    /// # Errors
    ///
    /// [`ManagerError::InformerType`] when `name` is registered with another
    /// object type; [`ManagerError::Informer`] when `make` fails.
    pub fn informer<O: Object>(
        &mut self,
        name: &str,
        make: impl FnOnce() -> Result<Informer<O>, InformerError>,
    ) -> Result<Informer<O>, ManagerError> {
        register_informer(&self.informers, &self.placer.metrics, name, make, true)
    }

    /// Starts configuring a controller (as [`Controller::builder`]) whose
    /// reconcile and queue metrics this manager exports. Register it with
    /// [`add_controller`](Manager::add_controller) once built.
    ///
    /// Replacing its observers with
    /// [`ControllerBuilder::observer`]/[`queue_observer`](ControllerBuilder::queue_observer)
    /// disconnects those metrics.
    pub fn controller<O: Object, R: Reconciler<O>>(
        &self,
        name: &str,
        primary: impl Into<Watch<O>>,
        reconciler: R,
    ) -> ControllerBuilder<O, R> {
        self.placer
            .metrics
            .controller_builder(name, primary, reconciler)
    }

    /// Registers a controller at its default placement: only on the
    /// leader on a manager with leader election
    /// ([`Placement::Leader`]), else on every replica
    /// ([`Placement::Everywhere`]). It starts when the manager runs and
    /// reconciles once its caches have synced. Its shutdown grace is capped
    /// at 80 % of the manager's graceful-shutdown timeout, so that a slow
    /// reconcile still leaves time to resign and stop the informers.
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateController`] when a controller of that name
    /// is already registered; [`ManagerError::UnshardedController`] on a
    /// manager with a shard membership and no election (say where it runs
    /// with [`add_controller_on`](Self::add_controller_on));
    /// [`ManagerError::UnfencedClient`] for a leader-only controller with a
    /// client that cannot be fenced.
    pub fn add_controller<O: Object, R: Reconciler<O>>(
        &mut self,
        controller: Controller<O, R>,
    ) -> Result<(), ManagerError> {
        self.check_name(controller.name())?;
        let placed = self.placer.place_default(controller)?;
        self.register(placed);
        Ok(())
    }

    /// Registers a controller that runs where `placement` says:
    ///
    /// - [`Placement::Everywhere`]: on every replica, every key, no fencing
    ///   token;
    /// - [`Placement::Leader`]: on the leader of the manager's election,
    ///   every key with the leader's token, a warm standby elsewhere;
    /// - [`Placement::Sharded`]: each key on the replica that owns its
    ///   shard ([`ShardCount::shard_of`](crate::shard::ShardCount::shard_of)
    ///   over its [`ShardKey`]), with the shard's token. Events of other
    ///   shards' keys are not queued. The informers cache every key,
    ///   unless built with the manager's
    ///   [`Sharding::cache_scope`](crate::placement::Sharding::cache_scope)
    ///   (through [`sharding`](Self::sharding)): then each keeps only its
    ///   replica's shards.
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateController`];
    /// [`ManagerError::NoElection`] or [`ManagerError::NoMembership`] when
    /// the manager has nothing to place it with;
    /// [`ManagerError::UnfencedClient`] for a leader-only or sharded
    /// controller with a client that cannot be fenced.
    pub fn add_controller_on<O, R>(
        &mut self,
        controller: Controller<O, R>,
        placement: Placement,
    ) -> Result<(), ManagerError>
    where
        O: Object<Key: ShardKey>,
        R: Reconciler<O>,
    {
        self.check_name(controller.name())?;
        let placed = self.placer.place(controller, placement)?;
        self.register(placed);
        Ok(())
    }

    /// [`add_controller_on`](Self::add_controller_on) with
    /// [`Placement::Sharded`].
    ///
    /// # Errors
    ///
    /// As there: [`ManagerError::NoMembership`] on a manager without a
    /// shard membership.
    pub fn add_sharded_controller<O, R>(
        &mut self,
        controller: Controller<O, R>,
    ) -> Result<(), ManagerError>
    where
        O: Object<Key: ShardKey>,
        R: Reconciler<O>,
    {
        self.add_controller_on(controller, Placement::Sharded)
    }

    fn check_name(&self, name: &str) -> Result<(), ManagerError> {
        if self.controllers.iter().any(|c| c.view.name == name) {
            return Err(ManagerError::DuplicateController {
                controller: name.to_owned(),
            });
        }
        Ok(())
    }

    fn register(&mut self, placed: Placed) {
        self.placer.admit(&placed);
        self.controllers.push(placed);
    }

    /// Registers a long-running task that runs on every replica, started
    /// right after the HTTP server (before informers) and stopped after the
    /// informers. `task` gets a token cancelled when it must stop.
    ///
    /// A task that returns `Ok` early simply ends; one that returns an error
    /// or panics stops the manager with [`ManagerError::TaskFailed`].
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateTask`] when a task of that name is already
    /// registered.
    pub fn add_task<F, Fut>(&mut self, name: &str, task: F) -> Result<(), ManagerError>
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        let task = TaskRun::once(task);
        self.push_task(name, Placement::Everywhere, task)
    }

    /// Registers a long-running task that runs where `placement` says:
    /// on every replica ([`Placement::Everywhere`], as
    /// [`add_task`](Self::add_task)), or only on the leader
    /// ([`Placement::Leader`]): started each time this replica wins the
    /// election (so `task` may be called more than once), and cancelled
    /// when it loses or the manager stops, with the controllers' shutdown
    /// grace before it is aborted. Tasks are never sharded.
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateTask`]; [`ManagerError::NoElection`] for a
    /// leader-only task on a manager without leader election;
    /// [`ManagerError::ShardedTask`].
    pub fn add_task_on<F, Fut>(
        &mut self,
        name: &str,
        placement: Placement,
        task: F,
    ) -> Result<(), ManagerError>
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        match placement {
            Placement::Sharded => Err(ManagerError::ShardedTask {
                task: name.to_owned(),
            }),
            Placement::Leader if self.placer.leadership.is_none() => {
                Err(ManagerError::NoElection {
                    runnable: name.to_owned(),
                })
            }
            _ => self.push_task(name, placement, TaskRun::repeated(task)),
        }
    }

    fn push_task(
        &mut self,
        name: &str,
        placement: Placement,
        run: TaskRun,
    ) -> Result<(), ManagerError> {
        if self.tasks.iter().any(|task| task.name == name) {
            return Err(ManagerError::DuplicateTask {
                task: name.to_owned(),
            });
        }
        self.placer.note(name, "task", placement);
        self.tasks.push(Task {
            name: name.to_owned(),
            placement,
            run,
        });
        Ok(())
    }

    /// The metrics registry, to register your own metrics next to the
    /// manager's.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The address the HTTP server is bound to (with the port chosen when
    /// port 0 was asked for), or `None` when it is disabled.
    #[cfg(feature = "http")]
    #[must_use]
    pub fn http_address(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// A token that starts a graceful shutdown when cancelled, as a first
    /// signal does.
    #[must_use]
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The manager's leadership, with leader election: whether this
    /// replica leads, and its term.
    #[must_use]
    pub fn leadership(&self) -> Option<&Leadership> {
        self.placer.leadership.as_ref()
    }

    /// The manager's sharding, with a shard membership: what this replica
    /// owns.
    #[must_use]
    pub fn sharding(&self) -> Option<&Sharding> {
        self.placer.sharding.as_ref()
    }

    /// A handle that adds controllers to this manager and removes them
    /// while it runs.
    #[must_use]
    pub fn handle(&self) -> ManagerHandle {
        ManagerHandle {
            commands: self.commands.clone(),
            informers: Arc::clone(&self.informers),
            metrics: self.placer.metrics.clone(),
            placer: self.placer.clone(),
        }
    }
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let informers: Vec<_> = self.informers.all().into_iter().map(|(n, _)| n).collect();
        let controllers: Vec<_> = self
            .controllers
            .iter()
            .map(|c| (c.view.name.as_str(), c.view.placement))
            .collect();
        let tasks: Vec<_> = self
            .tasks
            .iter()
            .map(|t| (t.name.as_str(), t.placement))
            .collect();
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("informers", &informers)
            .field("controllers", &controllers)
            .field("tasks", &tasks)
            .field("leadership", &self.placer.leadership)
            .field("sharding", &self.placer.sharding)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "http")]
fn bind(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
