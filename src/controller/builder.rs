//! Configuration of a [`Controller`].

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::context::Clients;
use super::external::External;
use super::key_groups::KeyGroups;
use super::observer::NoopObserver;
use super::reads::Reading;
use super::watch::{Mapped, Secondary, Watch};
use super::{
    Controller, ControllerError, ControllerObserver, ControllerSetting, HotKeyPolicy, Predicate,
    Reconciler, Trigger, Triggers,
};
use crate::client::Client;
use crate::error::SettingError;
use crate::informer::Informer;
use crate::object::Object;
use crate::queue::{Debounce, Priority, QueueObserver, WorkQueue};
use crate::rate_limit::RateLimiter;

/// Configures a [`Controller`]; start from [`Controller::builder`].
///
/// # Examples
///
/// A ReplicaSet-style controller: it reconciles sets, is woken when a pod
/// it owns changes (`owns` maps a pod to its owner's key), re-checks every
/// set every ten minutes, and runs two reconciles at a time, each for at
/// most a minute:
///
/// ```
/// use std::convert::Infallible;
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
/// use tend::controller::{Action, Context, Controller, Predicate, Reconciler};
/// use tend::memory::MemoryStore;
/// use tend::{Informer, Revision};
///
/// #[derive(Clone, Debug)]
/// struct Set { name: String, replicas: usize, version: Revision }
/// tend::impl_object!(Set, key: name: String, version: version);
/// #[derive(Clone, Debug)]
/// struct Pod { name: String, owner: String, version: Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// struct Sets;
/// impl Reconciler<Set> for Sets {
///     type Error = Infallible;
///     async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Infallible> {
///         let pods = ctx.cache::<Pod>().expect("the controller owns pods");
///         let _owned = pods.by_index("owner", ctx.key()).unwrap_or_default();
///         Ok(Action::Done)
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let sets = Informer::builder(MemoryStore::<Set>::new("sets")).build()?;
/// let pods = Informer::builder(MemoryStore::<Pod>::new("pods"))
///     .index("owner", |pod: &Pod| vec![pod.owner.clone()])
///     .build()?;
/// let controller = Controller::builder("sets", &sets, Sets)
///     .owns(&pods, |pod: &Pod| Some(pod.owner.clone()))
///     .predicate(Predicate::version_changed())
///     .resync(Duration::from_secs(600))
///     .concurrency(NonZeroUsize::new(2).unwrap())
///     .reconcile_timeout(Duration::from_secs(60))
///     .build()?;
/// assert_eq!(controller.name(), "sets");
/// # Ok(()) }
/// ```
#[must_use]
pub struct ControllerBuilder<O: Object, R> {
    name: String,
    inputs: Inputs<O>,
    reconciler: R,
    config: Config,
    limiter: Option<Box<dyn RateLimiter<O::Key>>>,
    observer: Arc<dyn ControllerObserver>,
    queue_observer: Option<Arc<dyn QueueObserver>>,
    pub(super) groups: KeyGroups<O::Key>,
}

/// What wakes a controller: its primary's events, its secondaries' mapped
/// to primary keys, and triggers from outside the informers.
pub(crate) struct Inputs<O: Object> {
    pub(crate) primary: Watch<O>,
    pub(crate) secondaries: Vec<Arc<dyn Secondary<O::Key>>>,
    pub(crate) externals: Vec<External<O::Key>>,
}

/// The runtime settings of a controller.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) concurrency: NonZeroUsize,
    pub(crate) resync: Option<Duration>,
    pub(crate) reconcile_timeout: Option<Duration>,
    pub(crate) max_retry_after: Duration,
    pub(crate) background: Priority,
    pub(crate) sync_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
    /// How long a key waits for the caches it wrote to; `None`: no waiting.
    pub(crate) read_your_writes: Option<Duration>,
    /// The debounce window of change events; `None`: none.
    pub(crate) debounce: Option<Duration>,
    /// No reconcile starts while a cache lags longer than this.
    pub(crate) lag_hold: Option<Duration>,
    /// When a key is hot; `None`: not detected.
    pub(crate) hot_keys: Option<HotKeyPolicy>,
    pub(crate) clients: Clients,
}

impl<O: Object, R: Reconciler<O>> ControllerBuilder<O, R> {
    pub(super) fn new(name: String, primary: Watch<O>, reconciler: R) -> Self {
        Self {
            name,
            inputs: Inputs {
                primary,
                secondaries: Vec::new(),
                externals: Vec::new(),
            },
            reconciler,
            config: Config {
                // Reconciles mostly wait on I/O: four let a slow key run
                // beside others without flooding the systems they write to.
                concurrency: NonZeroUsize::new(4).expect("4 is not zero"),
                resync: None,
                reconcile_timeout: Some(Duration::from_secs(300)),
                max_retry_after: DEFAULT_MAX_RETRY_AFTER,
                background: Priority::LOW,
                sync_timeout: Duration::from_secs(120),
                shutdown_grace: Duration::from_secs(30),
                read_your_writes: Some(DEFAULT_READ_YOUR_WRITES),
                debounce: None,
                lag_hold: None,
                hot_keys: Some(HotKeyPolicy::default()),
                clients: Clients::default(),
            },
            limiter: None,
            observer: Arc::new(NoopObserver),
            queue_observer: None,
            groups: KeyGroups::default(),
        }
    }

    /// Only the primary's events that `predicate` passes enqueue a reconcile.
    pub fn predicate(mut self, predicate: Predicate<O>) -> Self {
        self.inputs.primary = self.inputs.primary.predicate(predicate);
        self
    }

    /// Reconciles the owner of every object of `watch` that changes:
    /// `owner_of` maps an owned object to its owner's key (`None`: not owned
    /// by one of ours). An object that moves to another owner enqueues both.
    pub fn owns<P: Object>(
        mut self,
        watch: impl Into<Watch<P>>,
        owner_of: impl Fn(&P) -> Option<O::Key> + Send + Sync + 'static,
    ) -> Self {
        self.inputs.secondaries.push(Arc::new(Mapped {
            watch: watch.into(),
            map: Arc::new(move |object: &P| owner_of(object).into_iter().collect()),
            trigger: Trigger::Owned,
        }));
        self
    }

    /// Reconciles every key `map` returns for an object of `watch` that
    /// changes (a node to the pods on it, a config to its users …).
    pub fn watches<P: Object>(
        mut self,
        watch: impl Into<Watch<P>>,
        map: impl Fn(&P) -> Vec<O::Key> + Send + Sync + 'static,
    ) -> Self {
        self.inputs.secondaries.push(Arc::new(Mapped {
            watch: watch.into(),
            map: Arc::new(map),
            trigger: Trigger::Mapped,
        }));
        self
    }

    /// Tracks what reconciles read of `watch`'s objects through
    /// [`Context::cache`](super::Context::cache), and reconciles a key again
    /// when something its last reconcile read changes, with
    /// [`Trigger::Read`] and the dependency named in
    /// [`Context::read_causes`](super::Context::read_causes): no mapper, no
    /// index of the primary, no `watches` for that relation. What counts as
    /// changed, per read:
    ///
    /// - `get(key)`: the object under that key changes, is created (a read
    ///   that found nothing counts too) or is deleted;
    /// - `by_index(index, value)`: an object filed under `value` changes,
    ///   arrives or leaves; `keys_by_index`: one arrives or leaves;
    /// - `list()`, `len()`, `is_empty()`: any object changes;
    /// - [`list_where(filter)`](crate::Cache::list_where): an object that
    ///   passes the filter, before or after the change, changes.
    ///
    /// Each reconcile's reads replace the last ones: a dependency it no
    /// longer reads stops waking the key. A key's record is forgotten when
    /// its primary object is deleted or its reconcile finds it gone. The
    /// record costs about 400 bytes of heap per edge (a key, one distinct
    /// read: `tests/read_tracking_memory.rs`, string keys of 12 bytes, one
    /// reader per dependency), given back once no longer read; past 1,024 distinct reads of
    /// one source in one reconcile the rest count as one read of every
    /// object. Only sources registered here are tracked; composes with
    /// [`owns`](Self::owns) and [`watches`](Self::watches) (of the same
    /// informer too: a key woken by both gets both triggers). `watch`'s
    /// predicate filters the changes that wake readers; an
    /// [optional](super::Watch::optional) source is read once synced.
    ///
    /// # Examples
    ///
    /// A service reads its pods through an index of the pods: a pod that
    /// joins, leaves or changes under the service's selector wakes it.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tend::controller::{Action, Context, Controller, Reconciler};
    /// use tend::memory::MemoryStore;
    /// use tend::{Informer, Revision};
    ///
    /// #[derive(Clone, Debug)]
    /// struct Service { name: String, selector: String, version: Revision }
    /// tend::impl_object!(Service, key: name: String, version: version);
    /// #[derive(Clone, Debug)]
    /// struct Pod { name: String, app: String, version: Revision }
    /// tend::impl_object!(Pod, key: name: String, version: version);
    ///
    /// struct Route;
    /// impl Reconciler<Service> for Route {
    ///     type Error = Infallible;
    ///     async fn reconcile(&self, ctx: Context<Service>) -> Result<Action, Infallible> {
    ///         let (Some(service), Some(pods)) = (ctx.object(), ctx.cache::<Pod>()) else {
    ///             return Ok(Action::Done);
    ///         };
    ///         let _selected = pods.by_index("app", &service.selector).unwrap_or_default();
    ///         Ok(Action::Done)
    ///     }
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let services = Informer::builder(MemoryStore::<Service>::new("services")).build()?;
    /// let pods = Informer::builder(MemoryStore::<Pod>::new("pods"))
    ///     .index("app", |pod: &Pod| vec![pod.app.clone()])
    ///     .build()?;
    /// let controller = Controller::builder("route", &services, Route)
    ///     .reads(&pods)
    ///     .build()?;
    /// assert_eq!(controller.informers(), [services.id(), pods.id()]);
    /// # Ok(()) }
    /// ```
    pub fn reads<P: Object>(mut self, watch: impl Into<Watch<P>>) -> Self {
        let reading = Reading::<P, O::Key>::new(watch.into());
        self.inputs.secondaries.push(Arc::new(reading));
        self
    }

    /// Reconciles each key `keys` yields, with [`Trigger::External`]: keys
    /// that come from outside the informers (a channel fed by a webhook
    /// handler, a message bus, another controller). A key need not be
    /// cached: its reconcile then sees no object, as after a delete. Keys
    /// yielded while another run of the key is queued coalesce with it, as
    /// informer events do; keys yielded before the caches sync are
    /// reconciled once they have. The controller keeps running when the
    /// stream ends; call this once per stream.
    ///
    /// # Examples
    ///
    /// A webhook handler holds the sending half of a channel:
    ///
    /// ```
    /// # use tend::Revision;
    /// # #[derive(Clone, Debug)]
    /// # struct Site { name: String, version: Revision }
    /// # tend::impl_object!(Site, key: name: String, version: version);
    /// # struct Deploy;
    /// # impl tend::controller::Reconciler<Site> for Deploy {
    /// #     type Error = std::convert::Infallible;
    /// #     async fn reconcile(&self, _: tend::controller::Context<Site>) -> Result<tend::controller::Action, Self::Error> {
    /// #         Ok(tend::controller::Action::Done)
    /// #     }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tend::controller::Controller;
    /// use tend::memory::MemoryStore;
    /// use tend::Informer;
    ///
    /// let sites = Informer::builder(MemoryStore::<Site>::new("sites")).build()?;
    /// let (pushed, keys) = futures::channel::mpsc::unbounded::<String>();
    /// let controller = Controller::builder("deploy", &sites, Deploy)
    ///     .reconcile_on(keys)
    ///     .build()?;
    /// // In the webhook handler: a push to the site's repository.
    /// pushed.unbounded_send("blog".to_owned())?;
    /// # drop(controller);
    /// # Ok(()) }
    /// ```
    pub fn reconcile_on(mut self, keys: impl Stream<Item = O::Key> + Send + 'static) -> Self {
        self.inputs.externals.push(External::Keys(keys.boxed()));
        self
    }

    /// Reconciles every cached primary key each time `signals` yields, with
    /// [`Trigger::External`]: for changes that concern every object, such as
    /// a reloaded configuration or a rotated credential. The keys go in at
    /// the background priority, as a resync's do, so fresh changes are not
    /// queued behind them; a key already queued runs once. Signals yielded
    /// before the caches sync are acted on once they have. The controller
    /// keeps running when the stream ends.
    ///
    /// # Examples
    ///
    /// Re-check everything when the configuration file is reloaded:
    ///
    /// ```
    /// # use tend::Revision;
    /// # #[derive(Clone, Debug)]
    /// # struct Site { name: String, version: Revision }
    /// # tend::impl_object!(Site, key: name: String, version: version);
    /// # struct Deploy;
    /// # impl tend::controller::Reconciler<Site> for Deploy {
    /// #     type Error = std::convert::Infallible;
    /// #     async fn reconcile(&self, _: tend::controller::Context<Site>) -> Result<tend::controller::Action, Self::Error> {
    /// #         Ok(tend::controller::Action::Done)
    /// #     }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tend::controller::Controller;
    /// use tend::memory::MemoryStore;
    /// use tend::Informer;
    ///
    /// let sites = Informer::builder(MemoryStore::<Site>::new("sites")).build()?;
    /// let (reloaded, reloads) = futures::channel::mpsc::unbounded::<()>();
    /// let controller = Controller::builder("deploy", &sites, Deploy)
    ///     .reconcile_all_on(reloads)
    ///     .build()?;
    /// reloaded.unbounded_send(())?;
    /// # drop(controller);
    /// # Ok(()) }
    /// ```
    pub fn reconcile_all_on(mut self, signals: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.inputs.externals.push(External::All(signals.boxed()));
        self
    }

    /// How many keys are reconciled at once (default 4), at most 65,536:
    /// each worker is a task, so an absurd count would exhaust memory
    /// before doing any work. One key never runs on two workers at once,
    /// whatever this is.
    pub fn concurrency(mut self, workers: NonZeroUsize) -> Self {
        self.config.concurrency = workers;
        self
    }

    /// The retry backoff (default: 5 ms doubling to 1000 s, with an overall
    /// 10/s bucket of burst 100, as in client-go).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<O::Key> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Re-enqueues every cached primary key this often (±10 % jitter), at
    /// the background priority (default: never; informers may resync too).
    /// Must not be zero; `Duration::MAX` is as good as never.
    pub fn resync(mut self, period: Duration) -> Self {
        self.config.resync = Some(period);
        self
    }

    /// Cancels and retries a reconcile that runs longer than this (default
    /// 5 minutes). Must not be zero; `Duration::MAX` means no timeout.
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.config.reconcile_timeout = Some(timeout);
        self
    }

    /// The longest delay a reconcile error's
    /// [`ErrorPolicy::RetryAfter`](super::ErrorPolicy::RetryAfter) gets
    /// (default 1000 s, the default backoff's cap); a longer one waits this
    /// long. Must not be zero.
    pub fn max_retry_after(mut self, bound: Duration) -> Self {
        self.config.max_retry_after = bound;
        self
    }

    /// The priority of initial-list and resync keys (default
    /// [`Priority::LOW`], below fresh changes).
    pub fn background_priority(mut self, priority: Priority) -> Self {
        self.config.background = priority;
        self
    }

    /// How long `run` waits for every cache to sync before failing (default
    /// 2 minutes). Must not be zero; `Duration::MAX` waits for ever.
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.config.sync_timeout = timeout;
        self
    }

    /// How long in-flight reconciles may go on after shutdown starts before
    /// they are cancelled (default 30 s; under a manager, at most 80 % of its
    /// graceful-shutdown timeout). Must not be zero; `Duration::MAX` waits
    /// for them to finish.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Gives reconciles a client for objects of type `P`
    /// ([`Context::client`](super::Context::client)): writes through it carry
    /// the reconcile's fencing token, and are waited for (read-your-writes).
    /// Under leader election give a client with a fencing authority (on
    /// memory [`client_fenced_by`](crate::memory::MemoryStore::client_fenced_by)
    /// the elector; on etcd `client_fenced_by` the election), or every write
    /// fails with [`ClientError::NoFencing`](crate::client::ClientError::NoFencing).
    /// A second client of one type replaces the first.
    pub fn client<P: Object>(mut self, client: Client<P>) -> Self {
        self.config.clients.insert(client);
        self
    }

    /// Read-your-writes (on by default): after a reconcile of a key wrote
    /// through [`Context::client`](super::Context::client), the key's next
    /// reconcile does not start until every cache this controller watches of
    /// the types it wrote has applied those writes, so a reconcile never
    /// sees a cache older than its own key's writes (no duplicate creates,
    /// no hand-written "expectations"). The key waits in flight, holding no
    /// worker; keys that did not write are not delayed. The wait is bounded
    /// by `timeout` (default 10 s): past it the key goes on anyway, counted
    /// and logged. A write whose outcome is unknown
    /// ([`ClientError::Unavailable`](crate::client::ClientError::Unavailable):
    /// a create whose answer was lost with the server) is waited for as if
    /// it had landed at the backend's [head](crate::client::Backend::head),
    /// read (and tried again) once the backend answers, within the same
    /// bound; a backend that cannot tell its head is not waited for. `None` turns it off: a reconcile may then run before the
    /// cache shows what the last one wrote (lower latency for controllers
    /// whose writes are idempotent anyway). A zero timeout is refused.
    pub fn read_your_writes(mut self, timeout: Option<Duration>) -> Self {
        self.config.read_your_writes = timeout;
        self
    }

    /// Starts no reconcile while one of this controller's caches (the
    /// primary's, or a secondary's that is not
    /// [optional](super::Watch::optional)) has lagged its source for longer
    /// than `bound` ([`CacheLag::behind_for`](crate::CacheLag::behind_for)):
    /// a stale cache would have the reconciler act on a world that has moved
    /// on. Off by default. Keys stay queued, changes keep coalescing, and
    /// every held key runs once the caches catch up; a reconcile that
    /// started goes on. Checked before each key a worker takes (a lock per
    /// cache, only with this on), and every 100 ms while held. The lag is measured at the informers'
    /// probes (see [`InformerBuilder::lag_probe_every`](crate::InformerBuilder::lag_probe_every)),
    /// so keep the bound above a probe period. A zero bound is refused.
    pub fn hold_while_lagging(mut self, bound: Duration) -> Self {
        self.config.lag_hold = Some(bound);
        self
    }

    /// Detects hot keys with `policy` (default [`HotKeyPolicy::default`]:
    /// more than 30 reconciles that wrote within a minute): a key
    /// reconciled again and again with a write each time, the mark of two
    /// controllers undoing each other or of a reconciler that writes a new
    /// value on every run. Each episode is logged once (with the triggers
    /// that keep waking the key), counted
    /// (`tend_controller_hot_key_episodes_total`), listed by
    /// [`Controller::hot_keys`](super::Controller::hot_keys) and flagged on
    /// the status page; with [`HotKeyPolicy::spaced_up_to`] the key's
    /// reconciles are also spaced out while it lasts. Only writes through
    /// the reconcile's [`Context::client`](super::Context::client) count.
    /// Zero writes or a zero window or spacing is refused.
    pub fn hot_keys(mut self, policy: HotKeyPolicy) -> Self {
        self.config.hot_keys = Some(policy);
        self
    }

    /// Turns hot-key detection off.
    pub fn without_hot_keys(mut self) -> Self {
        self.config.hot_keys = None;
        self
    }

    /// Debounces change events (default: off), for controllers that prefer
    /// fewer reconciles to latency: a change of a key (of the primary, or of
    /// an owned or watched object mapped to it) reconciles it `window` after
    /// the key's *last* change, so a burst of changes closer together than
    /// `window` costs one reconcile, at the burst's last version. A key that
    /// never stops changing is still reconciled at most
    /// [`DEBOUNCE_WINDOWS`] windows after the first change it waits for.
    ///
    /// The price is latency: every change waits at least one window (and
    /// up to [`DEBOUNCE_WINDOWS`]) before its reconcile starts. What is not a
    /// change keeps its own timing: initial lists and resyncs are queued at
    /// once (at the background priority), retries and requeues wait exactly
    /// what they asked for (a change meanwhile runs with them rather than
    /// pushing them back). A change while the key's reconcile runs is
    /// waited for a window after that reconcile ends (bounded from that
    /// change). A zero window is refused; `Duration::MAX` postpones changes
    /// for ever.
    pub fn debounce(mut self, window: Duration) -> Self {
        self.config.debounce = Some(window);
        self
    }

    /// Receives reconcile measurements (default: none).
    pub fn observer(mut self, observer: Arc<dyn ControllerObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Receives the work queue's measurements (default: none).
    pub fn queue_observer(mut self, observer: Arc<dyn QueueObserver>) -> Self {
        self.queue_observer = Some(observer);
        self
    }

    /// Builds the controller.
    ///
    /// # Errors
    ///
    /// [`ControllerError::InvalidConfig`] for an empty name or a zero resync
    /// period, reconcile timeout, sync timeout, shutdown grace,
    /// read-your-writes timeout or debounce window.
    pub fn build(self) -> Result<Controller<O, R>, ControllerError> {
        self.validate()?;
        let mut queue = WorkQueue::builder()
            .payload::<Triggers>()
            .name(self.name.clone());
        if let Some(limiter) = self.limiter {
            queue = queue.boxed_rate_limiter(limiter);
        }
        if let Some(observer) = self.queue_observer {
            queue = queue.observer(observer);
        }
        if let Some(window) = self.config.debounce {
            queue = queue.debounce(Debounce {
                window,
                max: window.saturating_mul(DEBOUNCE_WINDOWS),
            });
        }
        let queue = self.groups.apply(queue);
        Ok(Controller::assemble(
            self.name,
            self.inputs,
            self.reconciler,
            queue.build(),
            self.config,
            self.observer,
        ))
    }
}

/// A zero duration standing for a policy's zero setting, if it has one.
fn hot_key_zero(policy: Option<HotKeyPolicy>) -> Option<Duration> {
    let policy = policy?;
    let zero = policy.writes() == 0
        || policy.window().is_zero()
        || policy.spacing().is_some_and(|s| s.is_zero());
    zero.then_some(Duration::ZERO)
}

/// The most windows a debounced change waits (see
/// [`ControllerBuilder::debounce`]): a key that changes without end is still
/// reconciled this often.
pub const DEBOUNCE_WINDOWS: u32 = 4;

/// How long a key waits for the caches it wrote to, by default.
pub(crate) const DEFAULT_READ_YOUR_WRITES: Duration = Duration::from_secs(10);

/// The longest delay an error's `RetryAfter` gets, by default.
const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(1000);

/// The most workers a controller runs (see `concurrency`).
const MAX_CONCURRENCY: usize = 1 << 16;

impl<O: Object, R> ControllerBuilder<O, R> {
    fn validate(&self) -> Result<(), ControllerError> {
        let config = &self.config;
        let zero = |setting: Option<Duration>| setting.is_some_and(|d| d.is_zero());
        let invalid = if self.name.is_empty() {
            Some((ControllerSetting::Name, SettingError::Empty))
        } else if config.concurrency.get() > MAX_CONCURRENCY {
            let max = MAX_CONCURRENCY as u64;
            Some((
                ControllerSetting::Concurrency,
                SettingError::AboveMax { max },
            ))
        } else {
            [
                (ControllerSetting::Resync, config.resync),
                (
                    ControllerSetting::ReconcileTimeout,
                    config.reconcile_timeout,
                ),
                (ControllerSetting::SyncTimeout, Some(config.sync_timeout)),
                (
                    ControllerSetting::MaxRetryAfter,
                    Some(config.max_retry_after),
                ),
                (
                    ControllerSetting::ShutdownGrace,
                    Some(config.shutdown_grace),
                ),
                (ControllerSetting::ReadYourWrites, config.read_your_writes),
                (ControllerSetting::Debounce, config.debounce),
                (ControllerSetting::HoldWhileLagging, config.lag_hold),
                (ControllerSetting::HotKeys, hot_key_zero(config.hot_keys)),
            ]
            .into_iter()
            .find(|(_, value)| zero(*value))
            .map(|(setting, _)| (setting, SettingError::Zero))
            .or_else(|| self.groups.invalid())
        };
        match invalid {
            Some((setting, error)) => Err(ControllerError::InvalidConfig {
                controller: self.name.clone(),
                setting,
                error,
            }),
            None => Ok(()),
        }
    }
}

impl<O: Object, R> fmt::Debug for ControllerBuilder<O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerBuilder")
            .field("name", &self.name)
            .field("primary", &self.inputs.primary)
            .field("secondaries", &self.inputs.secondaries.len())
            .field("externals", &self.inputs.externals.len())
            .field("config", &self.config)
            .field("grouped", &self.groups.is_grouped())
            .finish_non_exhaustive()
    }
}

impl<O: Object> From<&Informer<O>> for Watch<O> {
    fn from(informer: &Informer<O>) -> Self {
        Watch::new(informer.clone())
    }
}
