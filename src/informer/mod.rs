//! The informer: keeps a local cache of a source up to date and tells
//! subscribers what changed.
//!
//! (The concept is documented on [`Informer`], the public type.)

mod apply;
mod backoff;
mod cache;
mod diff;
mod dispatch;
mod objects;
mod reads;
mod scope;
mod staleness;
mod stats;
mod tombstones;
mod watcher;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use cache::{Cache, IndexValue};
pub use dispatch::Subscription;
pub use reads::Filter;
pub(crate) use reads::{Read, ReadHook};
pub use scope::CacheScope;
pub(crate) use scope::ScopeChanges;
pub use staleness::CacheLag;
pub use stats::InformerStats;

use self::cache::{IndexFn, TransformFn};
pub(crate) use self::dispatch::Handler;
use self::dispatch::{EachEvent, Subscribers};
use self::staleness::Staleness;
use self::stats::Counters;
use crate::error::SettingError;
use crate::object::Object;
use crate::source::Source;

/// What happened to one object, as delivered to subscribers.
///
/// Events carry shared `Arc`s: delivering one to several subscribers copies
/// nothing.
///
/// # Examples
///
/// A subscriber that logs what happened (a controller's subscription maps
/// events to keys instead, and never decides from the event alone):
///
/// ```
/// # use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)]
/// # struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// use std::sync::Arc;
/// use tend::Event;
///
/// fn describe(event: &Event<Light>) -> String {
///     match event {
///         Event::Initial(light) => format!("{} listed", light.room),
///         Event::Applied { old: None, new } => format!("{} created", new.room),
///         Event::Applied { old: Some(old), new } if old.on != new.on => {
///             format!("{} switched {}", new.room, if new.on { "on" } else { "off" })
///         }
///         Event::Applied { new, .. } => format!("{} changed", new.room),
///         Event::Deleted(light) => format!("{} deleted", light.room),
///         Event::Resync(light) => format!("{} resynced", light.room),
///     }
/// }
///
/// let off = Arc::new(Light { room: "hall".into(), on: false, version: Revision::new(1) });
/// let on = Arc::new(Light { on: true, version: Revision::new(2), ..Light::clone(&off) });
/// let event = Event::Applied { old: Some(off), new: Arc::clone(&on) };
/// assert_eq!(describe(&event), "hall switched on");
/// assert!(Arc::ptr_eq(event.object(), &on));
/// // Informer::subscribe(|event| println!("{}", describe(event))) would log each one.
/// ```
#[derive(Debug)]
pub enum Event<O> {
    /// The object was in the cache when the handler subscribed (or in the
    /// informer's first list).
    Initial(Arc<O>),
    /// The object was created (`old` is `None`) or changed.
    Applied {
        /// The state cached before, if any.
        old: Option<Arc<O>>,
        /// The new state.
        new: Arc<O>,
    },
    /// The object was deleted; this is its last cached state.
    Deleted(Arc<O>),
    /// The periodic resync re-delivers the cached object (nothing changed).
    Resync(Arc<O>),
}

impl<O> Event<O> {
    /// The object this event is about: its new state, or its last state for
    /// a deletion.
    #[must_use]
    pub fn object(&self) -> &Arc<O> {
        match self {
            Self::Initial(object) | Self::Deleted(object) | Self::Resync(object) => object,
            Self::Applied { new, .. } => new,
        }
    }
}

/// A setting of an [`InformerBuilder`], as
/// [`InformerError::InvalidOption`] names it; displayed as the builder
/// method's name.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{Informer, InformerError, InformerSetting, SettingError};
/// # #[derive(Clone, Debug)] struct Pod { name: String, version: tend::Revision }
/// # tend::impl_object!(Pod, key: name: String, version: version);
///
/// let built = Informer::builder(MemoryStore::<Pod>::new("pods"))
///     .backoff(Duration::from_secs(60), Duration::from_secs(1), Duration::from_secs(120))
///     .build();
/// let Err(InformerError::InvalidOption { setting, error, .. }) = built else { unreachable!() };
/// assert_eq!(setting, InformerSetting::Backoff);
/// assert_eq!(error, SettingError::Inverted); // the initial delay is above the maximum
/// assert_eq!(setting.to_string(), "backoff"); // the builder method's name
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InformerSetting {
    /// [`InformerBuilder::resync_every`].
    ResyncEvery,
    /// [`InformerBuilder::relist_every`].
    RelistEvery,
    /// [`InformerBuilder::backoff`].
    Backoff,
    /// [`InformerBuilder::lag_probe_every`].
    LagProbeEvery,
}

impl fmt::Display for InformerSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ResyncEvery => "resync_every",
            Self::RelistEvery => "relist_every",
            Self::Backoff => "backoff",
            Self::LagProbeEvery => "lag_probe_every",
        })
    }
}

/// Why an informer call failed.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{Informer, InformerError};
/// # #[derive(Clone, Debug)] struct Pod { name: String, node: String, version: tend::Revision }
/// # tend::impl_object!(Pod, key: name: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), InformerError> {
/// let informer = Informer::builder(MemoryStore::<Pod>::new("pods")).build()?;
/// // Nobody runs it, so its cache never syncs:
/// let timeout = Duration::from_secs(1);
/// let error = informer.wait_synced(timeout).await.unwrap_err();
/// assert_eq!(error, InformerError::SyncTimeout { source_name: "pods".into(), timeout });
///
/// let error = informer.cache().by_index("node", "n1").unwrap_err(); // never registered
/// assert!(matches!(error, InformerError::UnknownIndex { .. }));
/// assert_eq!(error.to_string(), "informer for source `pods` has no index named `node`");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// The cache (or a subscription) did not sync in time.
    #[error("informer for source `{source_name}` did not sync within {timeout:?}")]
    SyncTimeout {
        /// The source's name.
        source_name: String,
        /// How long the caller waited.
        timeout: Duration,
    },
    /// [`Cache::by_index`] named an index that was never registered.
    #[error("informer for source `{source_name}` has no index named `{index}`")]
    UnknownIndex {
        /// The source's name.
        source_name: String,
        /// The index asked for.
        index: String,
    },
    /// [`InformerBuilder::index`] registered two indexes with one name.
    #[error("informer for source `{source_name}` already has an index named `{index}`")]
    DuplicateIndex {
        /// The source's name.
        source_name: String,
        /// The repeated name.
        index: String,
    },
    /// A duration setting was zero, or the backoff's initial delay exceeded
    /// its maximum.
    #[error("informer for source `{source_name}`: `{setting}` {error}")]
    InvalidOption {
        /// The source's name.
        source_name: String,
        /// The setting that was wrong.
        setting: InformerSetting,
        /// What is wrong with it.
        error: SettingError,
    },
    /// [`Informer::run`] was called while the informer was already running.
    #[error("informer for source `{source_name}` is already running")]
    AlreadyRunning {
        /// The source's name.
        source_name: String,
    },
}

/// A cheap cloneable handle on an informer.
///
/// An [`Informer`] lists its [`Source`], then watches it from the list's
/// revision, applying every change to its [`Cache`] and delivering an
/// [`Event`] to each subscriber. It is a cheap cloneable handle: several
/// controllers share one informer (one list and one watch), each with its own
/// [`Subscription`]. The caller owns the work: [`Informer::run`] drives
/// everything in the caller's task and returns once cancelled, leaving no
/// task behind.
///
/// # What the informer guarantees
///
/// - **After every list the cache equals the source's snapshot.** The first
///   list is delivered as [`Event::Initial`]; a later list (a *relist*) is
///   delivered as the differences: [`Event::Applied`] for new and changed
///   objects, [`Event::Deleted`] for objects that vanished while the informer
///   was not watching. Objects whose version did not change produce no event
///   (the resync timer exists to re-deliver them).
/// - **Never back in time.** A change whose revision is not newer than the
///   cached object's (a duplicate, a reordered or replayed change) is ignored
///   and counted in [`InformerStats::stale_ignored`]; so is a re-creation
///   older than a recent deletion of the same key.
/// - **Resume, then relist.** When a watch ends after delivering something,
///   the informer resumes at once from the last revision it saw (changes
///   and bookmarks); when a watch fails, or ends without delivering
///   anything, it resumes after a jittered exponential backoff (800 ms
///   doubling to 30 s; reset once a connection stayed up for 2 minutes).
///   When the source says the revision expired it lists again (after a
///   backoff if no watch delivered anything since the last list, so a
///   source that expires faster than it can be listed is not hammered), and
///   so it does after several consecutive failed watches
///   ([`InformerBuilder::max_watch_failures`]).
/// - **Resync** ([`InformerBuilder::resync_every`]): every period (±10 %),
///   every cached object is delivered again as [`Event::Resync`], without
///   calling the source. It repairs lost *reconciles*, not lost *events*.
/// - **Relist** ([`InformerBuilder::relist_every`]): every period (±10 %),
///   the source is listed again, repairing whatever events the source lost.
///
/// # Subscribers
///
/// A handler is a synchronous, cheap closure (typically: map the object to
/// keys and push them into a work queue). Handlers are called one event at a
/// time, in order, from the informer's task, with no buffer in between. A
/// handler subscribed after the first list first receives every cached
/// object as [`Event::Initial`] (inside [`Informer::subscribe`]), then every
/// later event: nothing lost, nothing twice. A handler must not call
/// [`Informer::subscribe`] or drop a [`Subscription`] (that would deadlock);
/// it may read the store. A panicking handler panics [`Informer::run`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{Event, Informer, Object, Revision};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Light { room: String, on: bool, version: Revision }
///
/// impl Object for Light {
///     type Key = String;
///     fn key(&self) -> String { self.room.clone() }
///     fn version(&self) -> Revision { self.version }
///     fn set_version(&mut self, version: Revision) { self.version = version; }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lights = MemoryStore::new("lights");
/// lights.client().create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
///
/// let informer = Informer::builder(lights.clone()).build()?;
/// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// let _subscription = informer.subscribe(move |event: &Event<Light>| {
///     sink.lock().unwrap().push(event.object().room.clone());
/// });
///
/// let cancel = CancellationToken::new();
/// let run = tokio::spawn({
///     let (informer, cancel) = (informer.clone(), cancel.clone());
///     async move { informer.run(cancel).await }
/// });
/// informer.wait_synced(Duration::from_secs(5)).await?;
/// assert!(informer.cache().get(&"hall".to_string()).is_some());
///
/// cancel.cancel();
/// run.await??;
/// assert_eq!(*seen.lock().unwrap(), ["hall"]);
/// # Ok(())
/// # }
/// ```
pub struct Informer<O: Object> {
    shared: Arc<Shared<O>>,
}

/// Which informer a handle is a handle of: equal for clones of one
/// informer, different for two informers alive at once.
///
/// [`Controller::informers`](crate::controller::Controller::informers) names
/// the informers a controller reads by their ids, so that whoever runs the
/// controller can check that each one runs.
///
/// # Examples
///
/// ```
/// use tend::Informer;
/// use tend::memory::MemoryStore;
/// # #[derive(Clone, Debug)] struct Pod { name: String, version: tend::Revision }
/// # tend::impl_object!(Pod, key: name: String, version: version);
///
/// let pods = MemoryStore::<Pod>::new("pods");
/// let informer = Informer::builder(pods.clone()).build()?;
/// let other = Informer::builder(pods).build()?; // a second list and watch of one store
/// assert_eq!(informer.clone().id(), informer.id());
/// assert_ne!(other.id(), informer.id());
/// # Ok::<(), tend::InformerError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InformerId(usize);

/// What every handle of one informer shares.
struct Shared<O: Object> {
    source: Arc<dyn Source<Object = O>>,
    name: Arc<str>,
    store: cache::Cache<O>,
    subscribers: Arc<Subscribers<O>>,
    options: Options,
    transform: Option<TransformFn<O>>,
    /// The keys the cache keeps, when not all.
    scope: Option<Scoped<O::Key>>,
    counters: Counters,
    staleness: Staleness,
    running: AtomicBool,
}

/// An informer's scope and its end of it.
struct Scoped<K> {
    scope: CacheScope<K>,
    attached: scope::Attached,
}

/// Timers and backoff settings, validated by [`InformerBuilder::build`].
#[derive(Debug, Clone)]
struct Options {
    resync: Option<Duration>,
    relist: Option<Duration>,
    backoff_initial: Duration,
    backoff_max: Duration,
    backoff_reset_after: Duration,
    max_watch_failures: NonZeroU32,
    lag_probe: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync: None,
            relist: None,
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
            backoff_reset_after: Duration::from_secs(120),
            max_watch_failures: NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN),
            lag_probe: Some(Duration::from_secs(10)),
        }
    }
}

impl<O: Object> Clone for Informer<O> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<O: Object> fmt::Debug for Informer<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("source", &self.shared.name)
            .field("options", &self.shared.options)
            .field("running", &self.shared.running.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<O: Object> Informer<O> {
    /// Starts configuring an informer over `source`.
    pub fn builder(source: impl Source<Object = O>) -> InformerBuilder<O> {
        InformerBuilder::new(Arc::new(source))
    }

    /// Starts configuring an informer over a shared source.
    pub fn builder_from_arc(source: Arc<dyn Source<Object = O>>) -> InformerBuilder<O> {
        InformerBuilder::new(source)
    }

    /// The source's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This informer's identity (the same for every clone).
    #[must_use]
    pub fn id(&self) -> InformerId {
        InformerId(Arc::as_ptr(&self.shared).cast::<()>().addr())
    }

    /// A read handle on the cache.
    #[must_use]
    pub fn cache(&self) -> Cache<O> {
        self.shared.store.clone()
    }

    /// Registers `handler` for every event from now on.
    ///
    /// If the informer has already listed, `handler` first receives every
    /// cached object as [`Event::Initial`] — synchronously, before this call
    /// returns — then every later event. Otherwise it receives the first list
    /// as [`Event::Initial`]. Dropping the returned [`Subscription`]
    /// unsubscribes. A relist's changes arrive deletions first, so a
    /// handler that counts objects (say, per owner) never sees an object
    /// beside the one that replaced it while the watch was down.
    ///
    /// The replay runs in the caller's thread while event delivery waits
    /// (that is what makes it exact), so it costs one handler call per
    /// cached object. Must not be called from inside a handler (that would
    /// deadlock).
    pub fn subscribe<F>(&self, handler: F) -> Subscription<O>
    where
        F: FnMut(&Event<O>) + Send + 'static,
    {
        self.subscribe_handler(EachEvent(handler))
    }

    /// [`subscribe`](Self::subscribe) with a handler that may buffer between
    /// flushes (see [`Handler`]).
    pub(crate) fn subscribe_handler(&self, handler: impl Handler<O> + 'static) -> Subscription<O> {
        let id = self
            .shared
            .subscribers
            .add(&self.shared.store, Box::new(handler));
        Subscription::new(
            id,
            Arc::clone(&self.shared.subscribers),
            self.shared.store.clone(),
        )
    }

    /// Whether the first full list has been applied.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.shared.store.is_synced()
    }

    /// Waits until the first full list has been applied.
    ///
    /// # Errors
    ///
    /// [`InformerError::SyncTimeout`], naming the source, when that did not
    /// happen within `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), InformerError> {
        self.shared.store.wait_synced(timeout).await
    }

    /// The informer's counters now.
    #[must_use]
    pub fn stats(&self) -> InformerStats {
        let mut stats = self.shared.counters.snapshot(self.shared.store.len());
        stats.lag = self
            .shared
            .staleness
            .lag(stats.revision, tokio::time::Instant::now());
        stats
    }

    /// How far the cache is behind the source now; `None` until a probe of
    /// the source's head answered (never, when the source cannot tell or
    /// the probe is off: see [`InformerBuilder::lag_probe_every`]).
    #[must_use]
    pub fn lag(&self) -> Option<CacheLag> {
        let seen = self.shared.counters.revision();
        self.shared.staleness.lag(seen, tokio::time::Instant::now())
    }

    /// Lists and watches the source, keeping the cache up to date, until
    /// `cancel` is cancelled.
    ///
    /// Everything runs inside the returned future: no task is spawned, so
    /// when it returns all work has stopped. Source errors are retried (see
    /// the [`Informer`] docs), never returned. After it returns, `run` may
    /// be called again: the informer relists and carries on from its cache.
    ///
    /// # Errors
    ///
    /// [`InformerError::AlreadyRunning`] when another `run` of this informer
    /// is in progress.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the informer between two
    /// changes, with the cache consistent.
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), InformerError> {
        if self.shared.running.swap(true, Ordering::AcqRel) {
            return Err(InformerError::AlreadyRunning {
                source_name: self.shared.name.to_string(),
            });
        }
        let _running = RunningGuard(&self.shared.running);
        let span = tracing::info_span!("informer", source = %self.shared.name);
        let shared = &self.shared;
        let probe = async {
            if let Some(period) = shared.options.lag_probe {
                let seen = || shared.counters.revision();
                staleness::probe(&*shared.source, &shared.staleness, seen, period, &cancel).await;
            }
        };
        let watch = watcher::Runner::new(shared).run(cancel.clone());
        futures::future::join(watch, probe).instrument(span).await;
        Ok(())
    }
}

/// Clears the running flag when `run` returns or is dropped.
struct RunningGuard<'a>(&'a AtomicBool);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Configures an [`Informer`]; created by [`Informer::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{Informer, InformerError};
///
/// #[derive(Clone, Debug)]
/// struct Pod { name: String, node: String, logs: Vec<String>, version: tend::Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// let pods = MemoryStore::<Pod>::new("pods");
/// let informer = Informer::builder(pods.clone())
///     .resync_every(Duration::from_secs(600)) // re-deliver every cached pod
///     .relist_every(Duration::from_secs(3600)) // repair what the source lost
///     .index("node", |pod: &Pod| vec![pod.node.clone()])
///     .transform(|pod| Pod { logs: Vec::new(), ..pod }) // cache less
///     .build()?;
/// assert_eq!(informer.cache().index_names(), ["node"]);
///
/// let zero = Informer::builder(pods).resync_every(Duration::ZERO).build();
/// assert!(matches!(zero, Err(InformerError::InvalidOption { .. })));
/// # Ok::<(), InformerError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct InformerBuilder<O: Object> {
    source: Arc<dyn Source<Object = O>>,
    options: Options,
    indexes: Vec<(Arc<str>, IndexFn<O>)>,
    transform: Option<TransformFn<O>>,
    scope: Option<CacheScope<O::Key>>,
}

impl<O: Object> fmt::Debug for InformerBuilder<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let indexes: Vec<&str> = self.indexes.iter().map(|(name, _)| &**name).collect();
        f.debug_struct("InformerBuilder")
            .field("source", &self.source.name())
            .field("options", &self.options)
            .field("indexes", &indexes)
            .field("transform", &self.transform.is_some())
            .field("scope", &self.scope)
            .finish()
    }
}

impl<O: Object> InformerBuilder<O> {
    fn new(source: Arc<dyn Source<Object = O>>) -> Self {
        Self {
            source,
            options: Options::default(),
            indexes: Vec::new(),
            transform: None,
            scope: None,
        }
    }

    /// Re-delivers every cached object as [`Event::Resync`] every `period`
    /// (±10 %), without calling the source. Off by default. Must not be
    /// zero; `Duration::MAX` is as good as never.
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.options.resync = Some(period);
        self
    }

    /// Lists the source again every `period` (±10 %) while watching, to
    /// repair events the source lost. Off by default. Must not be zero;
    /// `Duration::MAX` is as good as never.
    pub fn relist_every(mut self, period: Duration) -> Self {
        self.options.relist = Some(period);
        self
    }

    /// Sets the reconnect backoff: `initial` doubling up to `max` (each
    /// jittered ±20 %, never above `max`), reset once a connection stayed
    /// healthy for `reset_after`. Defaults: 800 ms, 30 s, 2 minutes.
    /// `initial` and `reset_after` must not be zero, nor `initial` above
    /// `max`; `Duration::MAX` means no maximum, or never reset.
    pub fn backoff(mut self, initial: Duration, max: Duration, reset_after: Duration) -> Self {
        self.options.backoff_initial = initial;
        self.options.backoff_max = max;
        self.options.backoff_reset_after = reset_after;
        self
    }

    /// Lists again after this many consecutive watches that failed before
    /// delivering anything. Default: 5.
    pub fn max_watch_failures(mut self, failures: NonZeroU32) -> Self {
        self.options.max_watch_failures = failures;
        self
    }

    /// Asks the source for its newest revision every `period` (±10 %), to
    /// tell how far the cache is behind ([`Informer::lag`], and the
    /// manager's metrics, status page and lag bounds). Default: every 10 s,
    /// one cheap request ([`Source::head`]); a source that cannot tell is
    /// asked once. Must not be zero; `Duration::MAX` asks once.
    pub fn lag_probe_every(mut self, period: Duration) -> Self {
        self.options.lag_probe = Some(period);
        self
    }

    /// Never asks the source for its head: [`Informer::lag`] stays `None`.
    pub fn without_lag_probe(mut self) -> Self {
        self.options.lag_probe = None;
        self
    }

    /// Applies `transform` to every object before caching it (e.g. to strip
    /// fields and save memory). It must keep the key and the version. A list
    /// goes through [`Source::list_transformed`]: a source that reads in
    /// pages or as a stream (Kubernetes) transforms each object as it
    /// arrives, so the untransformed list never exists whole.
    pub fn transform<F>(mut self, transform: F) -> Self
    where
        F: Fn(O) -> O + Send + Sync + 'static,
    {
        self.transform = Some(Arc::new(transform));
        self
    }

    /// Keeps only the keys `scope` keeps in the cache (by default every
    /// key): the others are not cached and reach no handler. When the
    /// scope grows, the informer lists again to fetch the new keys'
    /// objects; when it shrinks, it drops the objects it no longer keeps,
    /// with no event. See [`CacheScope`].
    pub fn scope(mut self, scope: CacheScope<O::Key>) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Registers an index named `name`: `function` returns the values an
    /// object is filed under (any number), queried with [`Cache::by_index`].
    pub fn index<F>(mut self, name: impl Into<Arc<str>>, function: F) -> Self
    where
        F: Fn(&O) -> Vec<IndexValue> + Send + Sync + 'static,
    {
        self.indexes.push((name.into(), Arc::new(function)));
        self
    }

    /// Builds the informer (it does nothing until [`Informer::run`]).
    ///
    /// # Errors
    ///
    /// [`InformerError::DuplicateIndex`] when two indexes share a name;
    /// [`InformerError::InvalidOption`] when a period or backoff delay is
    /// zero, or the initial backoff exceeds the maximum.
    pub fn build(self) -> Result<Informer<O>, InformerError> {
        let name: Arc<str> = self.source.name().into();
        self.validate(&name)?;
        let store = cache::Cache::new(Arc::clone(&name), self.indexes);
        Ok(Informer {
            shared: Arc::new(Shared {
                source: self.source,
                name,
                store,
                subscribers: Arc::new(Subscribers::new()),
                options: self.options,
                transform: self.transform,
                scope: self.scope.map(|scope| Scoped {
                    attached: scope.attach(),
                    scope,
                }),
                counters: Counters::default(),
                staleness: Staleness::default(),
                running: AtomicBool::new(false),
            }),
        })
    }

    fn validate(&self, name: &Arc<str>) -> Result<(), InformerError> {
        let invalid = |setting, error| InformerError::InvalidOption {
            source_name: name.to_string(),
            setting,
            error,
        };
        let options = &self.options;
        if options.resync.is_some_and(|period| period.is_zero()) {
            return Err(invalid(InformerSetting::ResyncEvery, SettingError::Zero));
        }
        if options.relist.is_some_and(|period| period.is_zero()) {
            return Err(invalid(InformerSetting::RelistEvery, SettingError::Zero));
        }
        if options.lag_probe.is_some_and(|period| period.is_zero()) {
            return Err(invalid(InformerSetting::LagProbeEvery, SettingError::Zero));
        }
        if options.backoff_initial.is_zero() || options.backoff_reset_after.is_zero() {
            return Err(invalid(InformerSetting::Backoff, SettingError::Zero));
        }
        if options.backoff_initial > options.backoff_max {
            return Err(invalid(InformerSetting::Backoff, SettingError::Inverted));
        }
        for (position, (index, _)) in self.indexes.iter().enumerate() {
            if self.indexes[..position]
                .iter()
                .any(|(other, _)| other == index)
            {
                return Err(InformerError::DuplicateIndex {
                    source_name: name.to_string(),
                    index: index.to_string(),
                });
            }
        }
        Ok(())
    }
}
