//! `Recorder`: Kubernetes Events (`events.k8s.io/v1`) about the objects a
//! controller reconciles, with repeats aggregated into series.
//!
//! `cache.rs` remembers recent events and keeps one write per Event in
//! flight; `draft.rs` turns a published [`Occurrence`] into the API object.

mod background;
mod cache;
mod draft;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use tokio::time::Instant;

pub use self::background::EmitStats;
use self::background::{Background, DEFAULT_QUEUE};
use self::cache::{RecentEvents, Write};
use self::draft::{Draft, EventKey};
use super::endpoint::status_code;
use crate::client::{Fences, Fencing, FencingToken};

/// How long a repeat joins the series of the same event, by default:
/// client-go's aggregation interval.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(600);

/// How many recent events a recorder remembers, by default (client-go's
/// LRU size).
pub const DEFAULT_CAPACITY: NonZeroUsize = NonZeroUsize::new(4096).expect("not zero");

/// Whether an event is routine or calls for attention.
///
/// # Examples
///
/// ```
/// use tend::kube::EventType;
///
/// fn type_of(failed: bool) -> EventType {
///     if failed { EventType::Warning } else { EventType::Normal }
/// }
/// assert_eq!(type_of(true).as_str(), "Warning"); // the Event's `type`
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Routine: the controller did what it is for.
    Normal,
    /// Something went wrong, or may need a human.
    Warning,
}

impl EventType {
    /// The API's spelling: `Normal` or `Warning`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One event to publish about an object (the *regarding* object given to
/// [`Recorder::publish`]).
///
/// # Examples
///
/// ```
/// use tend::kube::{EventType, Occurrence};
///
/// let scaled = Occurrence {
///     type_: EventType::Normal,
///     reason: "ScalingReplicaSet".into(),
///     note: Some("scaled up to 3 replicas".into()),
///     action: "Scale".into(),
///     secondary: None, // or the `ObjectReference` of a pod it created
/// };
/// assert_eq!(scaled.type_.as_str(), "Normal");
/// // recorder.publish(&replica_set.object_ref(&()), &scaled).await
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    /// Routine or a warning.
    pub type_: EventType,
    /// Why the action was taken, machine-readable in `UpperCamelCase`
    /// (`ScalingReplicaSet`); 1 to 128 bytes.
    pub reason: String,
    /// A human-readable description; cut at 1024 bytes (the API's limit),
    /// on a character boundary.
    pub note: Option<String>,
    /// What the controller did or failed to do, machine-readable
    /// (`Scale`); 1 to 128 bytes.
    pub action: String,
    /// Another object the action involved (the `related` object; a pod a
    /// ReplicaSet created, say).
    pub secondary: Option<ObjectReference>,
}

/// Who reports events: a controller (`reportingController`, such as
/// `example.com/shop-operator`) and the instance of it
/// (`reportingInstance`, at most 128 bytes; default: the `HOSTNAME`,
/// which in a pod is its name, or `pid-N`).
///
/// # Examples
///
/// ```
/// use tend::kube::Reporter;
///
/// let default = Reporter::from("example.com/shop-operator"); // instance: the `HOSTNAME`
/// assert_eq!(default.instance, None);
/// let named = Reporter { instance: Some("shop-operator-0".into()), ..default };
/// assert_eq!(named.controller, "example.com/shop-operator");
/// // Recorder::new(client, named)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The controller's name.
    pub controller: String,
    /// This replica's name; `None` for the default.
    pub instance: Option<String>,
}

impl From<&str> for Reporter {
    fn from(controller: &str) -> Self {
        controller.to_owned().into()
    }
}

impl From<String> for Reporter {
    fn from(controller: String) -> Self {
        Self {
            controller,
            instance: None,
        }
    }
}

/// Why an event could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event or the reporter breaks one of the API's rules; nothing
    /// was sent.
    #[error("event {field} {problem}")]
    Invalid {
        /// The field: `reason`, `action`, `reporting controller`,
        /// `reporting instance`.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The API server refused the Event (a `4xx`: invalid, forbidden).
    #[error("the API server refused event `{name}`")]
    Rejected {
        /// The Event object's name.
        name: String,
        /// The server's answer.
        #[source]
        source: kube::Error,
    },
    /// The event's token is no longer current: this replica no longer
    /// leads (or owns the shard); nothing was sent.
    #[error("fencing token {token} is no longer current: the event was not sent")]
    Fenced {
        /// The stale token.
        token: FencingToken,
    },
    /// A token was given to a recorder without a fencing authority
    /// ([`Recorder::fenced_by`]); nothing was sent.
    #[error("an event with a fencing token, on a recorder without a fencing authority")]
    NoFencing,
    /// [`Recorder::emit`] found its queue full: the event was dropped
    /// (and counted).
    #[error("the event queue is full: the event was dropped")]
    QueueFull,
    /// [`Recorder::emit`] was called outside a tokio runtime, so no
    /// background task can send it.
    #[error("emitting an event needs a tokio runtime")]
    NoRuntime,
    /// The API server could not be reached or failed.
    #[error("the API server could not record event `{name}`")]
    Unavailable {
        /// The Event object's name.
        name: String,
        /// What failed.
        #[source]
        source: kube::Error,
    },
}

impl EventError {
    fn from_kube(name: &str, source: kube::Error) -> Self {
        let name = name.to_owned();
        match status_code(&source) {
            Some(400..=499) => Self::Rejected { name, source },
            _ => Self::Unavailable { name, source },
        }
    }
}

/// Publishes Kubernetes Events (`events.k8s.io/v1`) for one reporter,
/// aggregating repeats as client-go's event recorders do. Clones share
/// one memory of recent events.
///
/// # Aggregation
///
/// Two events are the same when they agree on the regarding object (its
/// API version, kind, namespace, name, uid and field path — not its
/// `resourceVersion`, so repeats about later versions of an object still
/// aggregate), the secondary object, reason, action, type and note. The
/// first occurrence creates an Event without a `series`; a repeat within
/// the [window](Self::window) of the previous one sets the Event's `series`
/// to `count: 2`, then 3, … with `lastObservedTime` (the API's rules for
/// series). A repeat after the window, or one the bounded memory
/// ([`capacity`](Self::capacity), least recently seen forgotten first)
/// no longer holds, creates a new Event. An Event deleted on the server
/// (the API server's event TTL, an hour by default) is created anew.
///
/// Concurrent repeats of one event never race: while a write for an Event
/// is in flight, further repeats are counted and written by that write's
/// publisher right after it, in order. Such a repeat's `publish` returns
/// once counted.
///
/// Events go to the regarding object's namespace (`default` for a
/// cluster-scoped object) and are named `{object name}.{hex time}`, as
/// client-go names them. The reporter needs `create` and `patch` on
/// `events` in `events.k8s.io`.
///
/// # In a reconciler
///
/// Hold the recorder in the reconciler (it is cheap to clone) and
/// [`emit`](Self::emit) from `reconcile`: the event is queued and sent in
/// the background, so the reconcile does not wait for the API server; an
/// event is supplementary information, so a failure is logged (and
/// counted) rather than failing the reconcile. With the reconcile's
/// fencing token ([`with_token`](Self::with_token)) on a recorder
/// [`fenced_by`](Self::fenced_by) the election, a deposed leader's events
/// are never sent. [`publish`](Self::publish) waits for the write instead.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::Resource;
/// use tend::controller::{Action, Context, Reconciler};
/// use tend::kube::{Occurrence, EventType, Recorder, Reporter};
///
/// struct Labeler {
///     recorder: Recorder,
/// }
///
/// impl Reconciler<ConfigMap> for Labeler {
///     type Error = std::convert::Infallible;
///
///     async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Self::Error> {
///         let Some(map) = ctx.object() else {
///             return Ok(Action::Done);
///         };
///         // … act on the map, then say what was done:
///         let event = Occurrence {
///             type_: EventType::Normal,
///             reason: "Labeled".into(),
///             note: Some("added the team label".into()),
///             action: "Label".into(),
///             secondary: None,
///         };
///         let recorder = self.recorder.with_token(ctx.fencing_token());
///         if let Err(error) = recorder.emit(&map.object_ref(&()), &event) {
///             tracing::warn!(%error, "an event was not queued");
///         }
///         Ok(Action::Done)
///     }
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let reporter = Reporter {
///     controller: "example.com/labeler".into(),
///     instance: std::env::var("POD_NAME").ok(),
/// };
/// let election = tend::kube::KubeElection::builder(client.clone(), "default", "labeler").build()?;
/// let labeler = Labeler { recorder: Recorder::new(client, reporter).fenced_by(&election) };
/// # drop(labeler); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorder {
    publisher: Arc<Publisher>,
    rules: Rules,
    background: Arc<Background>,
}

/// What writes events: shared by a recorder's clones and its background
/// sender.
struct Publisher {
    client: kube::Client,
    reporter: Arc<Reporter>,
    cache: Mutex<RecentEvents<EventKey>>,
}

/// How one recorder handle publishes: its settings, carried with each
/// emitted event.
#[derive(Clone)]
struct Rules {
    window: Duration,
    fencing: Option<Arc<dyn Fencing>>,
    /// The token this handle's events are fenced with (`with_token`).
    token: Option<FencingToken>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let publisher = &self.publisher;
        f.debug_struct("Recorder")
            .field("reporter", &publisher.reporter)
            .field("window", &self.rules.window)
            .field("remembered", &publisher.cache.lock().len())
            .field("fenced", &self.rules.fencing.is_some())
            .field("token", &self.rules.token)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder publishing as `reporter` (a controller name, or a
    /// [`Reporter`] with an instance) through `client`.
    #[must_use]
    pub fn new(client: kube::Client, reporter: impl Into<Reporter>) -> Self {
        let mut reporter = reporter.into();
        reporter.instance.get_or_insert_with(default_instance);
        let publisher = Publisher {
            client,
            reporter: Arc::new(reporter),
            cache: Mutex::new(RecentEvents::new(DEFAULT_CAPACITY)),
        };
        let rules = Rules {
            window: DEFAULT_WINDOW,
            fencing: None,
            token: None,
        };
        Self {
            publisher: Arc::new(publisher),
            rules,
            background: Arc::new(Background::new(DEFAULT_QUEUE)),
        }
    }

    /// How long after an occurrence a repeat joins its series (default
    /// [`DEFAULT_WINDOW`], 10 minutes; zero: never aggregate).
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.rules.window = window;
        self
    }

    /// How many recent events are remembered for aggregation (default
    /// [`DEFAULT_CAPACITY`], 4096); forgets what was remembered so far,
    /// and no longer shares it, nor the emit queue, with earlier clones.
    #[must_use]
    pub fn capacity(mut self, capacity: NonZeroUsize) -> Self {
        let publisher = Publisher {
            client: self.publisher.client.clone(),
            reporter: Arc::clone(&self.publisher.reporter),
            cache: Mutex::new(RecentEvents::new(capacity)),
        };
        self.publisher = Arc::new(publisher);
        self.background = Arc::new(Background::new(self.background.capacity()));
        self
    }

    /// How many events [`emit`](Self::emit) holds while they wait to be
    /// sent (default 1024); an emit beyond that is dropped and counted. No
    /// longer shares the queue with earlier clones.
    #[must_use]
    pub fn queue_capacity(mut self, capacity: NonZeroUsize) -> Self {
        self.background = Arc::new(Background::new(capacity));
        self
    }

    /// Fences this recorder's events as a client fenced by `authority` is
    /// fenced: an event published or emitted with a token
    /// ([`with_token`](Self::with_token)) is sent only while the token is
    /// current, checked just before it is sent, so a deposed leader
    /// publishes nothing (what Kubernetes' local deadline guarantees: see
    /// the module's "Fencing").
    #[must_use]
    pub fn fenced_by(mut self, authority: &impl Fences) -> Self {
        self.rules.fencing = Some(authority.fencing());
        self
    }

    /// A handle whose events carry `token` (a reconcile's
    /// [`Context::fencing_token`](crate::controller::Context::fencing_token));
    /// it shares everything else with this recorder. `None`: unfenced.
    #[must_use]
    pub fn with_token(&self, token: Option<FencingToken>) -> Self {
        let mut handle = self.clone();
        handle.rules.token = token;
        handle
    }

    /// The reporter, its instance filled in.
    #[must_use]
    pub fn reporter(&self) -> &Reporter {
        &self.publisher.reporter
    }

    /// Queues `event` about the object `regarding` refers to and returns
    /// at once: a background task publishes it as
    /// [`publish`](Self::publish) would (fenced, aggregated), so a
    /// reconcile never waits for the API server. A failed send is logged
    /// and counted ([`emit_stats`](Self::emit_stats)), not returned.
    ///
    /// # Errors
    ///
    /// [`EventError::Invalid`] as `publish` (nothing queued);
    /// [`EventError::QueueFull`] when [`queue_capacity`](Self::queue_capacity)
    /// events wait already (this one is dropped and counted);
    /// [`EventError::NoRuntime`] when called outside a tokio runtime.
    pub fn emit(&self, regarding: &ObjectReference, event: &Occurrence) -> Result<(), EventError> {
        let draft = Draft::new(regarding, event, &self.publisher.reporter)?;
        self.background
            .push(&self.publisher, draft, self.rules.clone())
    }

    /// Waits until every event emitted before this call was sent, dropped
    /// as fenced, or failed.
    pub async fn flush(&self) {
        self.background.flush().await;
    }

    /// What [`emit`](Self::emit) did so far, over this recorder's clones.
    #[must_use]
    pub fn emit_stats(&self) -> EmitStats {
        self.background.stats()
    }

    /// Publishes `event` about the object `regarding` refers to (from
    /// kube-rs's `Resource::object_ref`): creates an Event, or counts a
    /// repeat in the series of the Event already recording it.
    ///
    /// # Errors
    ///
    /// [`EventError::Invalid`] when a field breaks the API's rules
    /// (nothing is sent); [`EventError::Rejected`] when the API server
    /// refuses the Event; [`EventError::Unavailable`] when it cannot be
    /// reached. A repeat whose series failed to be written is written with
    /// the next repeat.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future may leave a repeat counted
    /// but unwritten until the next one.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        event: &Occurrence,
    ) -> Result<(), EventError> {
        let draft = Draft::new(regarding, event, &self.publisher.reporter)?;
        self.publisher.publish(&draft, &self.rules).await
    }
}

impl Publisher {
    /// Publishes `draft` unless its token is stale (checked first).
    async fn publish(&self, draft: &Draft, rules: &Rules) -> Result<(), EventError> {
        rules.check()?;
        let write = self
            .cache
            .lock()
            .observe(&draft.key, Instant::now(), rules.window, || {
                draft.fresh_name()
            });
        match write {
            Some(write) => self.write(draft, write, rules).await,
            None => Ok(()),
        }
    }

    /// Makes `write`, then the writes the cache asks for after it (repeats
    /// counted while one was in flight), each checked against the fence
    /// just before it is sent: a term may end during a round trip.
    async fn write(
        &self,
        draft: &Draft,
        mut write: Write,
        rules: &Rules,
    ) -> Result<(), EventError> {
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &draft.namespace);
        loop {
            if let Err(fenced) = rules.check() {
                self.drop_write(draft, &write);
                return Err(fenced);
            }
            let result = match &write {
                Write::Create { name } => api
                    .create(&PostParams::default(), &draft.event(name))
                    .await
                    .map(drop),
                Write::Series { name, count } => api
                    .patch(name, &PatchParams::default(), &series(*count))
                    .await
                    .map(drop),
            };
            match self.next(draft, &write, result)? {
                Some(next) => write = next,
                None => return Ok(()),
            }
        }
    }

    /// `write` will not be made: the cache forgets it as if it failed.
    fn drop_write(&self, draft: &Draft, write: &Write) {
        let mut cache = self.cache.lock();
        match write {
            Write::Create { name } => cache.forget(&draft.key, name),
            Write::Series { name, .. } => cache.abandon(&draft.key, name),
        }
    }

    /// The write after `write` ended with `result`, as the cache says.
    fn next(
        &self,
        draft: &Draft,
        write: &Write,
        result: kube::Result<()>,
    ) -> Result<Option<Write>, EventError> {
        let mut cache = self.cache.lock();
        let name = write.name();
        match (result, write) {
            (Ok(()), _) => Ok(cache.written(&draft.key, write)),
            // The Event expired or was deleted: record anew.
            (Err(error), Write::Series { .. }) if status_code(&error) == Some(404) => {
                Ok(cache.restart(&draft.key, name, draft.fresh_name()))
            }
            (Err(error), Write::Create { .. }) => {
                cache.forget(&draft.key, name);
                Err(EventError::from_kube(name, error))
            }
            (Err(error), Write::Series { .. }) => {
                cache.abandon(&draft.key, name);
                Err(EventError::from_kube(name, error))
            }
        }
    }
}

impl Rules {
    /// Refuses an event whose token is stale, as the client refuses a write.
    fn check(&self) -> Result<(), EventError> {
        let Some(token) = self.token else {
            return Ok(());
        };
        match &self.fencing {
            Some(fencing) if fencing.is_current(token) => Ok(()),
            Some(_) => Err(EventError::Fenced { token }),
            None => Err(EventError::NoFencing),
        }
    }
}

/// A merge patch setting an Event's series to `count` occurrences, the
/// last one now (the only change the API allows to an `events/v1` Event).
fn series(count: u32) -> Patch<serde_json::Value> {
    let series = EventSeries {
        count: i32::try_from(count).unwrap_or(i32::MAX),
        last_observed_time: MicroTime(Timestamp::now()),
    };
    Patch::Merge(serde_json::json!({ "series": series }))
}

/// `HOSTNAME` (a pod's name), else `pid-N`.
fn default_instance() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}
