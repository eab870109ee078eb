//! Helpers for testing your own controllers.
//!
//! With the `etcd` feature, [`etcd`] starts a real etcd server for a test.
//! With the `kube` feature, [`kube`] starts a real Kubernetes control plane
//! (etcd and kube-apiserver), as controller-runtime's envtest does. With
//! either, [`Proxy`] sits between a replica and its server and can cut it
//! off (a partition, a stalled connection). Every harness here fails with
//! one error type, [`HarnessError`].
//!
//! A [`Harness`] runs informers and controllers on the memory backend (or any
//! source) and waits until they have nothing left to do, so a test can write
//! the desired state, [`settle`](Harness::settle), and assert on the actual
//! state. Use it under tokio's paused clock (`#[tokio::test(start_paused =
//! true)]`): time then advances only when every task waits, so settling is
//! deterministic and backoffs of minutes take no real time.
//!
//! # Examples
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tend::client::Client;
//! use tend::controller::{Action, Context, Controller, Reconciler};
//! use tend::memory::MemoryStore;
//! use tend::testing::Harness;
//! use tend::{Informer, Object, Revision};
//!
//! #[derive(Clone, Debug)]
//! struct Light { room: String, on: bool, version: Revision }
//! impl Object for Light {
//!     type Key = String;
//!     fn key(&self) -> String { self.room.clone() }
//!     fn version(&self) -> Revision { self.version }
//!     fn set_version(&mut self, v: Revision) { self.version = v; }
//! }
//!
//! /// Turns every light on.
//! struct On(Client<Light>);
//! impl Reconciler<Light> for On {
//!     type Error = Infallible;
//!     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Infallible> {
//!         if let Some(light) = ctx.object().filter(|l| !l.on) {
//!             let _ = self.0.update(Light { on: true, ..(**light).clone() }).await;
//!         }
//!         Ok(Action::Done)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let lights = MemoryStore::new("lights");
//! let informer = Informer::builder(lights.clone()).build()?;
//! let mut harness = Harness::new();
//! harness.informer(&informer);
//! harness.controller(Controller::builder("on", &informer, On(lights.client())).build()?);
//!
//! lights.client().create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
//! harness.settle(Duration::from_secs(60)).await?;
//! assert!(lights.get(&"hall".to_owned()).unwrap().on);
//! harness.shutdown().await?;
//! # Ok(()) }
//! ```

mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(feature = "etcd", feature = "kube"))]
mod exec;
#[cfg(any(feature = "etcd", feature = "kube"))]
mod gateway;
#[cfg(feature = "kube")]
pub mod kube;
#[cfg(any(feature = "etcd", feature = "kube"))]
mod launcher;
#[cfg(any(feature = "etcd", feature = "kube"))]
mod process;
#[cfg(any(feature = "etcd", feature = "kube"))]
mod proxy;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::QueueStats;
use crate::controller::{Controller, Environment, Ownership, Reconciler};
use crate::informer::Informer;
use crate::object::Object;
use crate::placement::{Leadership, Sharding};

pub use self::error::HarnessError;
#[cfg(any(feature = "etcd", feature = "kube"))]
pub use self::proxy::Proxy;

/// Runs informers and controllers for a test, and waits until they are idle.
///
/// See the [module docs](self) for a whole test.
///
/// # Examples
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::client::Client;
/// # use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone, Debug)] struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// # struct On(Client<Light>);
/// # impl Reconciler<Light> for On {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Infallible> {
/// #         if let Some(light) = ctx.object().filter(|l| !l.on) {
/// #             let _ = self.0.update(Light { on: true, ..(**light).clone() }).await;
/// #         }
/// #         Ok(Action::Done)
/// #     }
/// # }
/// use std::time::Duration;
/// use tend::controller::Controller;
/// use tend::memory::MemoryStore;
/// use tend::testing::Harness;
/// use tend::{Informer, Revision};
///
/// // In a test: #[tokio::test(start_paused = true)]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lights = MemoryStore::new("lights");
/// let informer = Informer::builder(lights.clone()).build()?;
/// let mut harness = Harness::new();
/// harness.informer(&informer);
/// harness.controller(Controller::builder("on", &informer, On(lights.client())).build()?);
///
/// lights.put(Light { room: "hall".into(), on: false, version: Revision::ZERO });
/// harness.settle(Duration::from_secs(60)).await?; // until nothing is left to do
/// assert!(lights.get(&"hall".to_owned()).unwrap().on);
/// harness.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct Harness {
    stop: CancellationToken,
    tasks: JoinSet<Result<(), HarnessError>>,
    watched: Vec<Watched>,
    quiet: Duration,
    wall_floor: Duration,
}

/// Something whose idleness `settle` checks.
enum Watched {
    Informer {
        name: String,
        synced: Box<dyn Fn() -> bool + Send + Sync>,
    },
    Queue {
        name: String,
        stats: Box<dyn Fn() -> QueueStats + Send + Sync>,
    },
}

impl Harness {
    /// An empty harness. Settling requires 50 ms of quiet (of tokio's clock).
    #[must_use]
    pub fn new() -> Self {
        Self {
            stop: CancellationToken::new(),
            tasks: JoinSet::new(),
            watched: Vec::new(),
            quiet: Duration::from_millis(50),
            wall_floor: Duration::from_secs(10),
        }
    }

    /// The least real time [`settle`](Self::settle) allows before failing,
    /// whatever its timeout (default 10 s; see there).
    pub fn wall_clock_floor(&mut self, floor: Duration) -> &mut Self {
        self.wall_floor = floor;
        self
    }

    /// Runs `informer` until [`shutdown`](Self::shutdown).
    pub fn informer<O: Object>(&mut self, informer: &Informer<O>) {
        let (running, stop) = (informer.clone(), self.stop.clone());
        let name = informer.name().to_owned();
        self.watched.push(Watched::Informer {
            name: name.clone(),
            synced: Box::new({
                let informer = informer.clone();
                move || informer.is_synced()
            }),
        });
        self.spawn(name, async move { running.run(stop).await });
    }

    /// Runs `task` (named `name` in a failure) until it ends.
    fn spawn<E: std::fmt::Display>(
        &mut self,
        name: String,
        task: impl std::future::Future<Output = Result<(), E>> + Send + 'static,
    ) {
        self.tasks.spawn(async move {
            task.await.map_err(|error| HarnessError::TaskFailed {
                task: name,
                reason: error.to_string(),
            })
        });
    }

    /// Runs `controller` until [`shutdown`](Self::shutdown).
    pub fn controller<O: Object, R: Reconciler<O>>(&mut self, controller: Controller<O, R>) {
        self.run_controller(controller, None);
    }

    /// Runs `controller` until [`shutdown`](Self::shutdown), reconciling
    /// only the keys `ownership` owns (see
    /// [`Environment::ownership`](crate::controller::Environment::ownership)):
    /// a sharded controller with a [`Sharding`]
    /// run by [`sharding`](Self::sharding), or a leader-only one with a
    /// [`Leadership`] run by
    /// [`leadership`](Self::leadership). A sharded controller's keys of
    /// other shards are not queued, so they do not keep `settle` waiting; a
    /// standby's keys stay queued (not handed out) until it leads, so
    /// `settle` waits for that.
    pub fn controller_with<O: Object, R: Reconciler<O>>(
        &mut self,
        controller: Controller<O, R>,
        ownership: Ownership<O::Key>,
    ) {
        self.run_controller(controller, Some(ownership));
    }

    /// Runs `sharding` (joins its group, acquires and hands over shards)
    /// until [`shutdown`](Self::shutdown), which hands every shard over
    /// and leaves.
    pub fn sharding(&mut self, sharding: &Sharding) {
        let (running, stop) = (sharding.clone(), self.stop.clone());
        let name = format!("sharding {}/{}", sharding.group(), sharding.member());
        self.spawn(name, async move { running.run(stop).await });
    }

    /// Runs `leadership` (campaigns, leads) until
    /// [`shutdown`](Self::shutdown), which resigns.
    pub fn leadership(&mut self, leadership: &Leadership) {
        let (running, stop) = (leadership.clone(), self.stop.clone());
        let name = format!("leadership {}", leadership.name());
        self.spawn(name, async move { running.run(stop).await });
    }

    fn run_controller<O: Object, R: Reconciler<O>>(
        &mut self,
        controller: Controller<O, R>,
        ownership: Option<Ownership<O::Key>>,
    ) {
        let name = controller.name().to_owned();
        let queue = controller.queue();
        self.watched.push(Watched::Queue {
            name: name.clone(),
            stats: Box::new(move || queue.stats()),
        });
        let mut env = Environment::new(self.stop.clone());
        if let Some(ownership) = ownership {
            env = env.ownership(ownership);
        }
        self.spawn(name, controller.run_in(env));
    }

    /// Waits until every informer is synced and every controller's queue has
    /// no ready and no in-flight key, continuously for a short quiet period.
    /// Scheduled keys (retries, requeues) do not count: a controller that
    /// requeues every minute is idle between its runs.
    ///
    /// `timeout` is of tokio's clock, and the wall clock bounds it too: the
    /// call fails once `timeout` of tokio's time has passed, or once the
    /// longer of `timeout` and the [wall-clock floor](Self::wall_clock_floor)
    /// (10 s by default) of real time has. On the paused clock, tokio's time
    /// moves only when every task waits, so work that never lets the runtime
    /// idle (a reconcile that never waits, in a loop with a change it makes
    /// itself) stops it: `settle` then fails on the wall clock instead of
    /// hanging (even when every look finds nothing ready or in flight, the
    /// work running between looks), while the floor keeps a short `timeout`
    /// from failing a test whose real work is merely slow (a debug build on
    /// a busy machine).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotSettled`] naming what was busy when `timeout`
    /// passed; [`HarnessError::TaskFailed`] if a task stopped with an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn settle(&mut self, timeout: Duration) -> Result<(), HarnessError> {
        let deadline = crate::time::deadline(Instant::now(), timeout);
        let started = std::time::Instant::now();
        let wall_bound = timeout.max(self.wall_floor);
        let ticker = WallTicker::start();
        let mut quiet_since: Option<Instant> = None;
        // What was seen busy last: a runtime that never idles can look quiet
        // at every look while tokio's paused clock stands still.
        let mut last_busy: Option<String> = None;
        loop {
            if let Some(result) = self.tasks.try_join_next() {
                join_result(result)?;
            }
            let now = Instant::now();
            let past_wall = started.elapsed() >= wall_bound;
            match self.busy() {
                None if quiet_since.is_some_and(|since| now - since >= self.quiet) => {
                    return Ok(());
                }
                None if past_wall => {
                    let busy = last_busy.unwrap_or_else(|| String::from("nothing at each look"));
                    let busy =
                        format!("{busy} (tokio's clock stood still: the runtime never idled)");
                    return Err(HarnessError::NotSettled { timeout, busy });
                }
                None => {
                    quiet_since.get_or_insert(now);
                }
                Some(busy) if now >= deadline || past_wall => {
                    return Err(HarnessError::NotSettled { timeout, busy });
                }
                Some(busy) => {
                    quiet_since = None;
                    last_busy = Some(busy);
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(1)) => {}
                () = ticker.tick() => {}
            }
        }
    }

    /// What is still busy, if anything.
    fn busy(&self) -> Option<String> {
        let busy: Vec<String> = self
            .watched
            .iter()
            .filter_map(|watched| match watched {
                Watched::Informer { name, synced } => {
                    (!synced()).then(|| format!("informer `{name}` not synced"))
                }
                Watched::Queue { name, stats } => {
                    let stats = stats();
                    (stats.ready > 0 || stats.in_flight > 0).then(|| {
                        format!(
                            "controller `{name}` has {} ready and {} in-flight keys",
                            stats.ready, stats.in_flight
                        )
                    })
                }
            })
            .collect();
        (!busy.is_empty()).then(|| busy.join(", "))
    }

    /// Stops everything and waits until every task has ended.
    ///
    /// # Errors
    ///
    /// [`HarnessError::TaskFailed`] for the first task that failed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: the future owns the harness. Its first poll
    /// signals the stop; dropping it drops the harness's `JoinSet`, which
    /// aborts each task not yet ended at its next await point instead of
    /// waiting for it (a controller stops mid-reconcile rather than
    /// draining), and the tasks' errors are lost.
    pub async fn shutdown(mut self) -> Result<(), HarnessError> {
        self.stop.cancel();
        let mut first_error = Ok(());
        while let Some(result) = self.tasks.join_next().await {
            if let Err(error) = join_result(result) {
                first_error = first_error.and(Err(error));
            }
        }
        first_error
    }
}

/// Wakes a waiting task every few milliseconds of real time, from a thread
/// of its own: a busy runtime on the paused clock never fires tokio's
/// timers. The thread ends when this is dropped.
struct WallTicker {
    notify: Arc<Notify>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::Thread>,
}

impl WallTicker {
    const PERIOD: Duration = Duration::from_millis(5);

    fn start() -> Self {
        let notify = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let spawned = std::thread::Builder::new()
            .name(String::from("tend-settle-ticker"))
            .spawn({
                let (notify, stop) = (Arc::clone(&notify), Arc::clone(&stop));
                move || {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(Self::PERIOD);
                        notify.notify_one();
                    }
                }
            });
        // Without a thread (none could be made), only tokio's clock bounds.
        let thread = spawned.ok().map(|handle| handle.thread().clone());
        Self {
            notify,
            stop,
            thread,
        }
    }

    async fn tick(&self) {
        self.notify.notified().await;
    }
}

impl Drop for WallTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

fn join_result(
    result: Result<Result<(), HarnessError>, tokio::task::JoinError>,
) -> Result<(), HarnessError> {
    result.map_err(|error| HarnessError::TaskFailed {
        task: String::from("(unknown)"),
        reason: error.to_string(),
    })?
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("tasks", &self.tasks.len())
            .field("busy", &self.busy())
            .finish_non_exhaustive()
    }
}
