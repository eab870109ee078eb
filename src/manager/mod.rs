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
//! informers → (waits until every cache has synced, or fails naming the
//! source) → leader election → the controllers. On SIGTERM or SIGINT (or
//! [`Manager::shutdown_token`]) it stops them in the reverse order, the
//! whole shutdown bounded by a graceful-shutdown timeout (default 30 s),
//! after which the remaining tasks are aborted. A second signal forces the
//! shutdown at once. `run` returns only when every task it started has
//! stopped.
//!
//! # Leader election
//!
//! With a [`LeaderElector`], informers run at once (a warm standby: its
//! caches are full when it wins, so failover is fast) but controllers start
//! only once this replica leads. Reconcilers get the leader's fencing token
//! from [`Context::fencing_token`](crate::controller::Context::fencing_token).
//!
//! When the leadership is lost, no new reconcile starts, in-flight ones are
//! cancelled at once (no grace period: another replica may already be
//! acting on the same keys), and `run` returns
//! [`ManagerError::LostLeadership`]. The process should then exit (and be
//! restarted by its supervisor) rather than campaign again: a deposed leader
//! cannot know how stale its view is or which of its writes landed, and a
//! fresh process starts from a clean state with new caches and a new token.
//!
//! # Sharding
//!
//! With [`ManagerBuilder::sharding`] (instead of leader election) every
//! replica runs, and the keys of the controllers registered with
//! [`Manager::add_sharded_controller`] are spread over the live members of
//! a [`Membership`](crate::shard::Membership) group: each replica
//! reconciles only the keys of the shards it owns, with the shard's fencing
//! token. A lost membership stops every reconcile and fails `run` with
//! [`ManagerError::LostMembership`]; the process should exit.
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
//! ([`Manager::registry_mut`]). With the `http` feature (on by default) and
//! [`ManagerBuilder::http_address`] set, the manager serves:
//!
//! | path | answer |
//! |---|---|
//! | `/metrics` | the registry, in Prometheus text format 0.0.4 |
//! | `/healthz` | 200 while no task has failed and nothing is stuck (see [Health](#health)); 503 with one line per reason otherwise |
//! | `/readyz` | 200 once every cache has synced, while leading (or standing by, see [`ManagerBuilder::standby_is_ready`]), with sharding once the assigned shards are owned (or three handover timeouts after joining), and not shutting down; 503 with the reasons otherwise |
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

mod builder;
// Without `http`, parts only the endpoints read are unused.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod erased;
mod group;
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod health;
#[cfg(feature = "http")]
mod http;
mod metrics;
mod run;
mod sharding;
mod signals;
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod status;

use std::fmt;
use std::future::Future;
#[cfg(feature = "http")]
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use self::builder::ManagerBuilder;
pub use crate::election::{
    ElectionConfig, ElectionConfigError, ElectionError, InProcessCandidate, InProcessElection,
    LeaderElector,
};
pub use prometheus_client;

use self::erased::{ErasedController, FencingFn, SharedInformer};
use self::metrics::Metrics;
use self::sharding::Sharding;
use self::signals::Signals;
use crate::controller::{
    Controller, ControllerBuilder, ControllerError, KeyShards, Reconciler, ShardFeed, Watch,
};
use crate::informer::{Informer, InformerError};
use crate::shard::{MembershipError, Shard, ShardCount, ShardKey};
use crate::source::{BoxError, Object};

/// Why a manager could not be configured, or why it stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The builder was given a setting that cannot work.
    #[error("manager is misconfigured: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Two controllers were registered with one name.
    #[error("a controller named `{controller}` is already registered")]
    DuplicateController {
        /// The repeated name.
        controller: String,
    },
    /// Two tasks were registered with one name.
    #[error("a task named `{task}` is already registered")]
    DuplicateTask {
        /// The repeated name.
        task: String,
    },
    /// [`Manager::informer`] asked for a name registered with another object
    /// type.
    #[error("informer `{informer}` is registered for another object type")]
    InformerType {
        /// The informer's registered name.
        informer: String,
    },
    /// Building or running an informer failed.
    #[error("informer `{informer}` failed")]
    Informer {
        /// The informer's registered name.
        informer: String,
        /// What failed.
        #[source]
        source: InformerError,
    },
    /// An informer's cache did not sync within the sync timeout; no
    /// controller was started.
    #[error("informer `{informer}` never synced its cache")]
    CacheSync {
        /// The informer's registered name.
        informer: String,
        /// The source and how long was waited.
        #[source]
        source: InformerError,
    },
    /// A controller stopped with an error.
    #[error("controller `{controller}` failed")]
    Controller {
        /// The controller's name.
        controller: String,
        /// What failed.
        #[source]
        source: ControllerError,
    },
    /// A task returned an error or panicked.
    #[error("task `{task}` failed")]
    TaskFailed {
        /// The task's name.
        task: String,
        /// Its error, or the panic.
        #[source]
        source: BoxError,
    },
    /// Campaigning or watching the leadership failed.
    #[error("leader election failed")]
    Election(#[source] ElectionError),
    /// The leadership was lost: controllers were stopped and in-flight
    /// reconciles cancelled. The process should exit (see the
    /// [module docs](self)).
    #[error("lost the leadership of `{election}`")]
    LostLeadership {
        /// The election's name.
        election: String,
    },
    /// Both leader election and sharding were configured: they exclude
    /// each other (sharding spreads the work; leader election gives all of
    /// it to one replica).
    #[error("leader election and sharding cannot both be configured")]
    ShardingWithLeaderElection,
    /// [`Manager::add_controller`] on a sharded manager: every replica
    /// would reconcile every key. Use [`Manager::add_sharded_controller`].
    #[error("controller `{controller}` is not sharded, but the manager is")]
    UnshardedController {
        /// The controller's name.
        controller: String,
    },
    /// Joining the membership or acquiring a shard failed.
    #[error("sharding failed")]
    Membership(#[source] MembershipError),
    /// The membership ended (it expired, or was taken away): controllers
    /// were stopped and in-flight reconciles cancelled. The process should
    /// exit, as after a lost leadership.
    #[error("lost the membership of group `{group}`")]
    LostMembership {
        /// The group's name.
        group: String,
    },
    /// The signal handlers could not be installed.
    #[error("installing the signal handlers failed")]
    Signals(#[source] std::io::Error),
    /// The HTTP address could not be bound or served.
    #[error("the HTTP endpoint failed")]
    Http(#[source] std::io::Error),
    /// Tasks were still running when the graceful-shutdown timeout passed;
    /// they were aborted.
    #[error("tasks were still running after the graceful-shutdown timeout of {timeout:?}")]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
    },
    /// A second signal forced the shutdown; running tasks were aborted.
    #[error("shutdown forced by a second signal")]
    ForcedShutdown,
}

/// The long-running task of [`Manager::add_task`], boxed.
type TaskFn = Box<
    dyn FnOnce(CancellationToken) -> futures::future::BoxFuture<'static, Result<(), BoxError>>
        + Send,
>;

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
    metrics: Metrics,
    informers: Vec<(String, Arc<dyn SharedInformer>)>,
    controllers: Vec<Box<dyn ErasedController>>,
    tasks: Vec<(String, TaskFn)>,
    elector: Option<Arc<dyn LeaderElector>>,
    fencing: Arc<Mutex<Option<u64>>>,
    sharding: Option<Arc<Sharding>>,
    /// Each sharded controller's feed of an acquired shard's keys.
    feeds: Vec<ShardFeed>,
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
    standby_ready: bool,
    stalls: health::StallLimits,
}

impl Manager {
    /// Starts configuring a manager.
    pub fn builder() -> ManagerBuilder {
        ManagerBuilder::new()
    }

    fn assemble(builder: ManagerBuilder) -> Result<Self, ManagerError> {
        let mut registry = builder.registry.unwrap_or_default();
        let metrics = Metrics::register(&mut registry);
        #[cfg(feature = "http")]
        let listener = match builder.http_address {
            Some(address) => Some(bind(address).map_err(ManagerError::Http)?),
            None => None,
        };
        if let Some(elector) = &builder.elector {
            metrics.set_leader(elector.name(), false);
        }
        if let Some((membership, _)) = &builder.sharding {
            metrics.set_shards_owned(membership.group(), 0);
        }
        Ok(Self {
            config: Config {
                grace: builder.grace,
                sync_timeout: builder.sync_timeout,
                standby_ready: builder.standby_ready,
                stalls: builder.stalls,
            },
            registry,
            metrics,
            informers: Vec::new(),
            controllers: Vec::new(),
            tasks: Vec::new(),
            elector: builder.elector,
            fencing: Arc::new(Mutex::new(None)),
            sharding: builder.sharding.map(|(membership, shards)| {
                Arc::new(Sharding::new(membership, shards, builder.handover))
            }),
            feeds: Vec::new(),
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
    /// and the manager runs it and waits for it to sync before starting
    /// controllers. An informer not registered here is never run.
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
        if let Some((_, shared)) = self.informers.iter().find(|(n, _)| n == name) {
            return shared
                .as_any()
                .downcast_ref::<Informer<O>>()
                .cloned()
                .ok_or_else(|| ManagerError::InformerType {
                    informer: name.to_owned(),
                });
        }
        let informer = make().map_err(|source| ManagerError::Informer {
            informer: name.to_owned(),
            source,
        })?;
        let shared: Arc<dyn SharedInformer> = Arc::new(informer.clone());
        self.metrics.add_informer(name, Arc::clone(&shared));
        self.informers.push((name.to_owned(), shared));
        Ok(informer)
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
        Controller::builder(name, primary, reconciler)
            .observer(self.metrics.controller_observer(name))
            .queue_observer(self.metrics.queue_observer(name))
    }

    /// Registers a controller, to be started once caches have synced (and
    /// this replica leads, under leader election). Its shutdown grace is
    /// capped at 80 % of the manager's graceful-shutdown timeout, so that a
    /// slow reconcile still leaves time to resign and stop the informers.
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateController`] when a controller of that name
    /// is already registered; [`ManagerError::UnshardedController`] on a
    /// sharded manager (use [`add_sharded_controller`](Self::add_sharded_controller)).
    pub fn add_controller<O: Object, R: Reconciler<O>>(
        &mut self,
        controller: Controller<O, R>,
    ) -> Result<(), ManagerError> {
        if self.sharding.is_some() {
            return Err(ManagerError::UnshardedController {
                controller: controller.name().to_owned(),
            });
        }
        self.register(controller)
    }

    /// Registers a controller that, on a manager built with
    /// [`ManagerBuilder::sharding`], reconciles only the keys of the shards
    /// this replica owns (by [`ShardCount::shard_of`] over the key's
    /// [`ShardKey`]), each reconcile with its shard's fencing token in
    /// [`Context::fencing_token`](crate::controller::Context::fencing_token).
    /// Events of other shards' keys are not queued; the informers still
    /// cache every key. On a manager without sharding, the same as
    /// [`add_controller`](Self::add_controller).
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateController`] when a controller of that name
    /// is already registered.
    pub fn add_sharded_controller<O, R>(
        &mut self,
        mut controller: Controller<O, R>,
    ) -> Result<(), ManagerError>
    where
        O: Object<Key: ShardKey>,
        R: Reconciler<O>,
    {
        if let Some(sharding) = &self.sharding {
            if self
                .controllers
                .iter()
                .any(|c| c.name() == controller.name())
            {
                return Err(ManagerError::DuplicateController {
                    controller: controller.name().to_owned(),
                });
            }
            controller.set_shards(KeyShards {
                owned: Arc::clone(&sharding.owned),
                shard_of: shard_of::<O::Key>,
            });
            self.feeds.push(controller.shard_feed());
        }
        self.register(controller)
    }

    fn register<O: Object, R: Reconciler<O>>(
        &mut self,
        mut controller: Controller<O, R>,
    ) -> Result<(), ManagerError> {
        let name = controller.name().to_owned();
        if self.controllers.iter().any(|c| c.name() == name) {
            return Err(ManagerError::DuplicateController { controller: name });
        }
        // Leave a fifth of the manager's timeout to resign and stop the
        // informers after the controllers.
        controller.cap_shutdown_grace(self.config.grace.mul_f64(0.8));
        if self.elector.is_some() {
            let fencing = Arc::clone(&self.fencing);
            let token: FencingFn = Arc::new(move || *fencing.lock());
            controller.set_fencing_token(token);
        }
        let controller: Box<dyn ErasedController> = Box::new(controller);
        self.metrics
            .add_controller(&name, controller.concurrency(), controller.queue());
        self.controllers.push(controller);
        Ok(())
    }

    /// Registers a long-running task, started right after the HTTP server
    /// (before informers) on every replica, leader or not, and stopped after
    /// the informers. `task` gets a token cancelled when it must stop.
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
        if self.tasks.iter().any(|(n, _)| n == name) {
            return Err(ManagerError::DuplicateTask {
                task: name.to_owned(),
            });
        }
        let task: TaskFn = Box::new(move |cancel| Box::pin(task(cancel)));
        self.tasks.push((name.to_owned(), task));
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
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let informers: Vec<_> = self.informers.iter().map(|(n, _)| n.as_str()).collect();
        let controllers: Vec<_> = self.controllers.iter().map(|c| c.name()).collect();
        let tasks: Vec<_> = self.tasks.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("informers", &informers)
            .field("controllers", &controllers)
            .field("tasks", &tasks)
            .field("leader_election", &self.elector.as_ref().map(|e| e.name()))
            .field("sharding", &self.sharding.as_ref().map(|s| s.group()))
            .finish_non_exhaustive()
    }
}

/// A key's shard: `ShardCount::shard_of` as a plain function, so that a
/// controller keeps it without a `ShardKey` bound.
fn shard_of<K: ShardKey>(count: ShardCount, key: &K) -> Shard {
    count.shard_of(key)
}

#[cfg(feature = "http")]
fn bind(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
