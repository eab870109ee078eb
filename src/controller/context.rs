//! What a reconcile is given: the key, the current object, and more.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Triggers;
use super::reads::{ReadCause, Recording, hooked};
use super::scope::{Record, Scope};
use crate::client::FencingToken;
use crate::client::{Client, WriteHook};
use crate::informer::Cache;
use crate::object::{Object, Revision};

/// Everything a reconcile of one key gets.
///
/// # Examples
///
/// A reconciler that writes down what it was given, run by a
/// [`Harness`](crate::testing::Harness) through a create and a delete:
///
/// ```
/// # use std::convert::Infallible;
/// # use std::sync::{Arc, Mutex};
/// # use std::time::Duration;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # use tend::memory::MemoryStore;
/// # use tend::testing::Harness;
/// # use tend::{Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// #[derive(Clone, Default)]
/// struct Notes(Arc<Mutex<Vec<String>>>);
///
/// impl Reconciler<Light> for Notes {
///     type Error = Infallible;
///
///     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Infallible> {
///         let state = match (ctx.object(), ctx.deleted()) {
///             (Some(light), _) => format!("on={}", light.on), // as cached now
///             (None, Some(last)) => format!("deleted, was on={}", last.on), // for cleanup
///             (None, None) => "absent".to_owned(),
///         };
///         let note = format!("{} {state} ({}, attempt {})", ctx.key(), ctx.triggers(), ctx.attempt());
///         self.0.lock().unwrap().push(note);
///         Ok(Action::Done)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let store = MemoryStore::new("lights");
/// # let informer = Informer::builder(store.clone()).build()?;
/// # let notes = Notes::default();
/// # let mut harness = Harness::new();
/// # harness.informer(&informer);
/// # harness.controller(Controller::builder("notes", &informer, notes.clone()).build()?);
/// store.put(Light { room: "hall".into(), on: true, version: Revision::ZERO });
/// harness.settle(Duration::from_secs(60)).await?;
/// store.client().delete(&"hall".to_owned()).await?;
/// harness.settle(Duration::from_secs(60)).await?;
/// assert_eq!(*notes.0.lock().unwrap(), [
///     "hall on=true (initial, attempt 1)",
///     "hall deleted, was on=true (deleted, attempt 1)",
/// ]);
/// # harness.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct Context<O: Object> {
    pub(super) key: O::Key,
    pub(super) object: Option<Arc<O>>,
    pub(super) last_state: Option<Arc<O>>,
    pub(super) attempt: u32,
    pub(super) triggers: Triggers,
    /// This reconcile's token (made on first use) and writes.
    pub(super) scope: Arc<Scope>,
    pub(super) caches: Arc<Caches>,
    pub(super) fencing_token: Option<FencingToken>,
    /// Whether writes through its clients are waited for.
    pub(super) read_your_writes: bool,
    /// Where its reads of tracked sources go (`reads`), if any.
    pub(super) recording: Option<Arc<Recording<O::Key>>>,
    /// What woke it through tracked reads.
    pub(super) read_causes: Vec<ReadCause>,
}

impl<O: Object> Context<O> {
    /// The key being reconciled.
    pub fn key(&self) -> &O::Key {
        &self.key
    }

    /// The primary object as cached right before this reconcile, or `None`
    /// if it does not exist (deleted, or never created): absence is a state
    /// to reconcile too.
    pub fn object(&self) -> Option<&Arc<O>> {
        self.object.as_ref()
    }

    /// The last state the cache held of the primary object, when it was
    /// deleted and this key has not been reconciled successfully since
    /// (`None` while [`object`](Self::object) is `Some`): what cleanup of
    /// external things the object named (a DNS record, a disk, a file)
    /// needs, once the cache no longer has it. It comes from the informer's
    /// delete event, or from a delete found on a relist, and is kept in
    /// memory until a reconcile given it returns `Ok` or an error with
    /// [`ErrorPolicy::Terminal`](super::ErrorPolicy::Terminal) (nothing
    /// runs a deleted key again after one); so it is lost if the
    /// process restarts first: for cleanup that must happen exactly once
    /// across restarts, use finalizers ([`Lifecycle`](crate::Lifecycle)).
    pub fn deleted(&self) -> Option<&Arc<O>> {
        self.last_state.as_ref()
    }

    /// 1 for a first attempt, n + 1 after n failures or
    /// [`Action::Requeue`](super::Action::Requeue)s in a row (the rate
    /// limiter's count; reset by `Done`, `RequeueAfter` or a terminal error).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why this reconcile ran.
    pub fn triggers(&self) -> Triggers {
        self.triggers
    }

    /// The dependencies whose change woke it
    /// ([`Trigger::Read`](super::Trigger::Read)), the first per tracked
    /// source since the key's last reconcile began
    /// ([`ControllerBuilder::reads`](super::ControllerBuilder::reads));
    /// empty when no tracked read woke it.
    pub fn read_causes(&self) -> &[ReadCause] {
        &self.read_causes
    }

    /// A token cancelled when this reconcile must stop, so that work it
    /// spawned (tasks, requests running on their own) can watch it and stop
    /// too. It belongs to this reconcile alone, and is cancelled exactly when:
    ///
    /// - this reconcile's timeout passes (right before its future is dropped);
    /// - leadership is lost;
    /// - the controller stops: its shutdown grace period is over, or its
    ///   [`run`](super::Controller::run) returns (or is dropped).
    ///
    /// The last two hold after the reconcile has returned too: work it
    /// spawned stops when the controller stops acting. Nothing else cancels
    /// it: never another key's timeout, never the reconcile's own return.
    /// Each call gives a child token: cancelling it yourself affects nothing
    /// else.
    ///
    /// # Examples
    ///
    /// ```
    /// # use tend::controller::Context;
    /// # #[derive(Clone)] struct Job { name: String, v: tend::Revision }
    /// # tend::impl_object!(Job, key: name: String, version: v);
    /// fn start_upload(ctx: &Context<Job>) {
    ///     let stop = ctx.cancelled();
    ///     tokio::spawn(async move {
    ///         tokio::select! {
    ///             () = stop.cancelled() => { /* controller stopped: give up */ }
    ///             () = async { /* the long upload */ } => {}
    ///         }
    ///     });
    /// }
    /// ```
    pub fn cancelled(&self) -> CancellationToken {
        self.scope.token().child_token()
    }

    /// A read handle to the cache of objects of type `P` that this
    /// controller watches (primary or secondary), or `None` if it watches
    /// none, or only through an [optional](super::Watch::optional) source
    /// that has not synced yet. With several sources of one type, the first
    /// registered.
    ///
    /// When the source was registered with
    /// [`reads`](super::ControllerBuilder::reads), the handle records what
    /// this reconcile reads through it (by key, absent keys included, by
    /// index, listings and [`list_where`](Cache::list_where) filters): once
    /// the reconcile ends, a change of any of it queues this key again with
    /// [`Trigger::Read`](super::Trigger::Read), until a later reconcile
    /// no longer reads it. Reads made after the reconcile ended (a handle
    /// kept in a spawned task) are not recorded.
    pub fn cache<P: Object>(&self) -> Option<Cache<P>> {
        let (cache, record) = self.caches.get::<P>()?;
        Some(match (record, &self.recording) {
            (Some(record), Some(recording)) => hooked::<P, O::Key>(cache, record, recording),
            _ => cache,
        })
    }

    /// A client for objects of type `P`, if the controller was given one
    /// ([`ControllerBuilder::client`](super::ControllerBuilder::client)),
    /// or `None`. It is the reconcile's own handle:
    ///
    /// - under leader election its writes carry this reconcile's
    ///   [`fencing_token`](Self::fencing_token), so a deposed leader's late
    ///   write is refused by the backend and changes nothing;
    /// - with read-your-writes on (the default), the revisions it writes are
    ///   recorded, and this key's next reconcile waits until the controller's
    ///   cache of `P` has applied them: it never sees its own writes missing;
    /// - each of its writes refused with
    ///   [`ClientError::Fenced`](crate::client::ClientError::Fenced) is
    ///   reported to the controller's observer
    ///   ([`ControllerObserver::fenced_write_refused`](super::ControllerObserver::fenced_write_refused)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tend::controller::{Action, Context, Reconciler};
    /// # #[derive(Clone, Debug, PartialEq)] struct Light { room: String, on: bool, v: tend::Revision }
    /// # tend::impl_object!(Light, key: room: String, version: v);
    ///
    /// struct On;
    ///
    /// impl Reconciler<Light> for On {
    ///     type Error = tend::client::ClientError;
    ///
    ///     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, Self::Error> {
    ///         let (Some(light), Some(lights)) = (ctx.object(), ctx.client::<Light>()) else {
    ///             return Ok(Action::Done);
    ///         };
    ///         if !light.on {
    ///             lights.update(Light { on: true, ..(**light).clone() }).await?;
    ///         }
    ///         Ok(Action::Done)
    ///     }
    /// }
    /// ```
    pub fn client<P: Object>(&self) -> Option<Client<P>> {
        let client = self.caches.client::<P>()?;
        let client = match self.fencing_token {
            Some(token) => client.fenced(token),
            None => client,
        };
        let cache = self
            .caches
            .position::<P>()
            .filter(|_| self.read_your_writes);
        let hook: Arc<dyn WriteHook> = match cache {
            Some(cache) => Arc::new(Record::new(&self.scope, cache)),
            // Refusals are counted all the same.
            None => Arc::clone(&self.scope) as Arc<dyn WriteHook>,
        };
        Some(client.hooked(hook))
    }

    /// The fencing token this reconcile runs under, when its controller
    /// runs under an [`Ownership`](super::Ownership) (leader-only: the
    /// leader's token, which grows with every change of leader; sharded:
    /// the key's shard's token): pass it to writes that check it, so that a
    /// deposed owner's late write is refused. `None` for a controller that
    /// runs everywhere.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing_token
    }
}

impl<O: Object> fmt::Debug for Context<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("key", &self.key)
            .field("exists", &self.object.is_some())
            .field("attempt", &self.attempt)
            .field("triggers", &self.triggers)
            .finish_non_exhaustive()
    }
}

/// Read handles to every cache a controller watches, found by type, with
/// their applied revisions, and the clients it was given.
///
/// Cloned once per worker: contexts share their worker's copy, so handing
/// one to a reconcile does not bounce a reference count between cores.
#[derive(Default, Clone)]
pub(crate) struct Caches {
    stores: Vec<Arc<dyn Any + Send + Sync>>,
    /// Per store: whether it may be used before it has synced
    /// (`Watch::optional`: not until then).
    optional: Vec<bool>,
    revisions: Vec<watch::Receiver<Revision>>,
    /// Per store: the record of its reads, when they are tracked (`reads`).
    records: Vec<Option<ErasedRecord>>,
    clients: Clients,
}

/// A tracked source's record, its type erased.
type ErasedRecord = Arc<dyn Any + Send + Sync>;

impl Caches {
    pub(crate) fn push<P: Object>(&mut self, store: Cache<P>, optional: bool) {
        self.revisions.push(store.revisions());
        self.stores.push(Arc::new(store));
        self.optional.push(optional);
        self.records.push(None);
    }

    /// Adds `store` with its reads recorded into `record` (an already
    /// added `store`, such as the primary's, gets the record).
    pub(crate) fn track<P: Object>(
        &mut self,
        store: Cache<P>,
        optional: bool,
        record: ErasedRecord,
    ) {
        let same = |s: &Arc<dyn Any + Send + Sync>| {
            s.downcast_ref::<Cache<P>>()
                .is_some_and(|s| s.same_as(&store))
        };
        let at = match self.stores.iter().position(same) {
            Some(at) => at,
            None => {
                self.push(store, optional);
                self.stores.len() - 1
            }
        };
        if let Some(slot @ None) = self.records.get_mut(at) {
            *slot = Some(record);
        }
    }

    pub(super) fn set_clients(&mut self, clients: Clients) {
        self.clients = clients;
    }

    /// The first cache of `P`, with its record of reads if tracked.
    fn get<P: Object>(&self) -> Option<(Cache<P>, Option<&ErasedRecord>)> {
        let at = self.position::<P>()?;
        let store = self.stores.get(at)?.downcast_ref::<Cache<P>>()?;
        let usable = !self.optional.get(at).copied().unwrap_or(false) || store.is_synced();
        let record = self.records.get(at).and_then(Option::as_ref);
        usable.then(|| (store.clone(), record))
    }

    /// Where the first cache of `P` is.
    fn position<P: Object>(&self) -> Option<usize> {
        self.stores.iter().position(|s| s.is::<Cache<P>>())
    }

    fn client<P: Object>(&self) -> Option<Client<P>> {
        self.clients.get::<P>()
    }

    /// Each cache's applied revision, in the order of `position`.
    pub(super) fn revisions(&self) -> &[watch::Receiver<Revision>] {
        &self.revisions
    }
}

/// The clients a controller was given, one per object type.
#[derive(Default, Clone)]
pub(crate) struct Clients(Vec<Given>);

/// One client given to the builder.
#[derive(Clone)]
struct Given {
    client: Arc<dyn Any + Send + Sync>,
    fences: bool,
    object_type: &'static str,
}

impl Clients {
    /// Adds `client`, replacing one of the same type.
    pub(super) fn insert<P: Object>(&mut self, client: Client<P>) {
        self.0.retain(|c| !c.client.is::<Client<P>>());
        self.0.push(Given {
            fences: client.can_fence(),
            object_type: std::any::type_name::<P>(),
            client: Arc::new(client),
        });
    }

    fn get<P: Object>(&self) -> Option<Client<P>> {
        self.0
            .iter()
            .find_map(|c| c.client.downcast_ref::<Client<P>>())
            .cloned()
    }

    /// The object types of the clients without a fencing authority.
    pub(super) fn unfenced(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|c| !c.fences)
            .map(|c| c.object_type)
            .collect()
    }
}

impl fmt::Debug for Clients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} clients", self.0.len())
    }
}
