//! Garbage collection: deleting objects whose owner is gone (Kubernetes'
//! owner references and cascading deletion).
//!
//! A type names its owner by implementing [`Owned`]; a
//! [`GarbageCollector`] is a controller over the dependents that deletes
//! each one whose owner no longer exists. It is built from the public
//! controller API only: the dependents are its primary, and the owners are
//! watched, each owner event mapped to its dependents (through the
//! [`OWNER_INDEX`] when the dependents' informer has it, else by a scan of
//! their cache). So it is level-triggered: an orphan is found whatever
//! brought it to the queue (the owner's delete, a dependent created after
//! its owner vanished, the initial list, a relist after a broken watch).
//!
//! An orphan in the cache waits out the grace period (default
//! [`DEFAULT_GRACE`]; a cache may lag behind its owner's creation), then
//! the owner is read live, and only if it is still absent is the dependent
//! deleted, at the version it was seen at, through the client: fenced by
//! the reconcile's token under leader election (give a client made with
//! `client_fenced_by`). With [`keep_orphans`](GarbageCollector::keep_orphans)
//! nothing is deleted.
//!
//! Owner identity is the key: an owner deleted and re-created under the
//! same key in the instant between the live read and the delete loses its
//! dependents. Where keys are reused, put something unique in them (as
//! Kubernetes' owner references carry the owner's UID).
//!
//! ```
//! # use std::time::Duration;
//! use tend::gc::{self, GarbageCollector, Owned};
//! use tend::memory::MemoryStore;
//! use tend::{Informer, Revision};
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Set { name: String, version: Revision }
//! tend::impl_object!(Set, key: name: String, version: version);
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Pod { name: String, set: Option<String>, version: Revision }
//! tend::impl_object!(Pod, key: name: String, version: version);
//!
//! impl Owned for Pod {
//!     type Owner = Set;
//!     fn owner(&self) -> Option<String> { self.set.clone() }
//! }
//!
//! let (sets, pods) = (MemoryStore::<Set>::new("sets"), MemoryStore::<Pod>::new("pods"));
//! let pod_informer = Informer::builder(pods.clone())
//!     .index(gc::OWNER_INDEX, gc::owner_index::<Pod>)
//!     .build()
//!     .unwrap();
//! let set_informer = Informer::builder(sets.clone()).build().unwrap();
//! let collector = GarbageCollector::new(pods.client(), sets.client())
//!     .grace(Duration::from_secs(5))
//!     .controller("pod-gc", pod_informer, set_informer)
//!     .unwrap();
//! # let _ = collector;
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::client::{Client, ClientError};
use crate::controller::{Action, Context, Controller, ControllerError, Reconciler};
use crate::informer::{Cache, IndexValue, Informer};
use crate::object::Object;

/// How long an orphan waits before it is deleted, unless told otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The name of the index [`owner_index`] makes: register it on the
/// dependents' informer so that an owner's event finds its dependents
/// without a scan.
pub const OWNER_INDEX: &str = "tend.gc/owner";

/// An object that may belong to an owner of another type: it is garbage
/// once the owner is gone.
///
/// # Examples
///
/// ```
/// use tend::gc::{self, Owned};
/// use tend::Revision;
///
/// #[derive(Clone, Debug)]
/// struct Set { name: String, version: Revision }
/// tend::impl_object!(Set, key: name: String, version: version);
///
/// #[derive(Clone, Debug)]
/// struct Pod { name: String, set: Option<String>, version: Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// impl Owned for Pod {
///     type Owner = Set;
///     fn owner(&self) -> Option<String> { self.set.clone() }
/// }
///
/// let pod = Pod { name: "web-1".into(), set: Some("web".into()), version: Revision::ZERO };
/// assert_eq!(pod.owner().as_deref(), Some("web"));
/// assert_eq!(gc::owner_index(&pod), ["\"web\""]); // its `OWNER_INDEX` value
/// ```
pub trait Owned: Object {
    /// The owner's type.
    type Owner: Object;

    /// The owner's key, if this object has one.
    fn owner(&self) -> Option<<Self::Owner as Object>::Key>;
}

/// The [`OWNER_INDEX`] values of a dependent: its owner's key, formatted
/// with `Debug`.
pub fn owner_index<D: Owned>(dependent: &D) -> Vec<IndexValue> {
    dependent
        .owner()
        .map(|key| index_value(&key))
        .into_iter()
        .collect()
}

fn index_value(key: &impl fmt::Debug) -> IndexValue {
    format!("{key:?}")
}

/// Deletes dependents whose owner is gone; a [`Reconciler`] over the
/// dependents, made into a controller by
/// [`controller`](Self::controller). See the [module docs](self).
///
/// # Examples
///
/// ```
/// # use tend::gc::Owned;
/// # #[derive(Clone, Debug)] struct Set { name: String, version: Revision }
/// # tend::impl_object!(Set, key: name: String, version: version);
/// # #[derive(Clone, Debug)] struct Pod { name: String, set: Option<String>, version: Revision }
/// # tend::impl_object!(Pod, key: name: String, version: version);
/// # impl Owned for Pod {
/// #     type Owner = Set;
/// #     fn owner(&self) -> Option<String> { self.set.clone() }
/// # }
/// use std::time::Duration;
/// use tend::gc::GarbageCollector;
/// use tend::memory::MemoryStore;
/// use tend::testing::Harness;
/// use tend::{Informer, Revision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (sets, pods) = (MemoryStore::<Set>::new("sets"), MemoryStore::<Pod>::new("pods"));
/// sets.put(Set { name: "web".into(), version: Revision::ZERO });
/// for (pod, set) in [("web-1", "web"), ("db-1", "db")] { // there is no set `db`
///     pods.put(Pod { name: pod.into(), set: Some(set.into()), version: Revision::ZERO });
/// }
/// let pod_informer = Informer::builder(pods.clone()).build()?;
/// let set_informer = Informer::builder(sets.clone()).build()?;
/// let collector = GarbageCollector::new(pods.client(), sets.client())
///     .grace(Duration::ZERO) // at once (default: 5 s)
///     .controller("pod-gc", pod_informer.clone(), set_informer.clone())?;
/// let mut harness = Harness::new();
/// harness.informer(&pod_informer);
/// harness.informer(&set_informer);
/// harness.controller(collector);
/// harness.settle(Duration::from_secs(60)).await?;
/// assert!(pods.get(&"web-1".to_owned()).is_some());
/// assert!(pods.get(&"db-1".to_owned()).is_none()); // an orphan: deleted
/// # harness.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct GarbageCollector<D: Owned> {
    dependents: Client<D>,
    owners: Client<D::Owner>,
    owner_cache: Option<Cache<D::Owner>>,
    grace: Duration,
    keep_orphans: bool,
    /// When each orphan awaiting its grace was first seen; an entry goes
    /// when its key is deleted, adopted or gone.
    orphaned: Mutex<HashMap<D::Key, Instant>>,
}

impl<D: Owned> fmt::Debug for GarbageCollector<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GarbageCollector")
            .field("dependents", &self.dependents.name())
            .field("owners", &self.owners.name())
            .field("grace", &self.grace)
            .field("keep_orphans", &self.keep_orphans)
            .finish_non_exhaustive()
    }
}

impl<D: Owned> GarbageCollector<D> {
    /// A collector deleting through `dependents` and reading owners live
    /// through `owners`, with [`DEFAULT_GRACE`].
    #[must_use]
    pub fn new(dependents: Client<D>, owners: Client<D::Owner>) -> Self {
        Self {
            dependents,
            owners,
            owner_cache: None,
            grace: DEFAULT_GRACE,
            keep_orphans: false,
            orphaned: Mutex::new(HashMap::new()),
        }
    }

    /// How long an orphan waits before the owner is read live and the
    /// orphan deleted (zero: at once; `Duration::MAX`: never).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Whether orphans are kept instead of deleted (default `false`): for
    /// a migration, or owners about to be re-created under their keys.
    #[must_use]
    pub fn keep_orphans(mut self, keep: bool) -> Self {
        self.keep_orphans = keep;
        self
    }

    /// The controller named `name` running this collector over the
    /// dependents of `dependents`, watching `owners`; add it to a manager
    /// with [`Manager::add_controller`](crate::manager::Manager::add_controller).
    ///
    /// # Errors
    ///
    /// The errors of [`ControllerBuilder::build`](crate::controller::ControllerBuilder::build).
    pub fn controller(
        mut self,
        name: impl Into<String>,
        dependents: Informer<D>,
        owners: Informer<D::Owner>,
    ) -> Result<Controller<D, Self>, ControllerError> {
        self.owner_cache = Some(owners.cache());
        let cache = dependents.cache();
        Controller::builder(name, dependents, self)
            .watches(owners, move |owner: &D::Owner| {
                dependents_of(&cache, &owner.key())
            })
            .build()
    }

    /// Forgets `key` as an orphan awaiting its grace.
    fn forget(&self, key: &D::Key) {
        self.orphaned.lock().remove(key);
    }

    /// How long the orphan `key` still waits.
    fn remaining_grace(&self, key: &D::Key) -> Duration {
        let now = Instant::now();
        let since = *self.orphaned.lock().entry(key.clone()).or_insert(now);
        self.grace.saturating_sub(now.duration_since(since))
    }

    /// Deletes the orphan `dependent` if its owner is absent on a live
    /// read.
    async fn collect(
        &self,
        ctx: &Context<D>,
        dependent: &D,
        owner: &<D::Owner as Object>::Key,
    ) -> Result<Action, ClientError> {
        if self.owners.get(owner).await?.is_some() {
            self.forget(ctx.key());
            return Ok(Action::Done);
        }
        let client = match ctx.fencing_token() {
            Some(token) => self.dependents.fenced(token),
            None => self.dependents.clone(),
        };
        match client.delete_at(ctx.key(), dependent.version()).await {
            Ok(_) => {}
            Err(error) if error.is_not_found() => {}
            // Changed since the cache saw it: look again at the new state.
            Err(error) if error.is_conflict() => return Ok(Action::Requeue),
            Err(error) => return Err(error),
        }
        self.forget(ctx.key());
        Ok(Action::Done)
    }
}

/// The cached dependents of the owner `owner`: by index when there is one,
/// else by a scan.
fn dependents_of<D: Owned>(cache: &Cache<D>, owner: &<D::Owner as Object>::Key) -> Vec<D::Key> {
    if let Ok(keys) = cache.keys_by_index(OWNER_INDEX, &index_value(owner)) {
        return keys;
    }
    cache
        .list()
        .into_iter()
        .filter(|d| d.owner().as_ref() == Some(owner))
        .map(|d| d.key())
        .collect()
}

impl<D: Owned> Reconciler<D> for GarbageCollector<D> {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<D>) -> Result<Action, ClientError> {
        let dependent = ctx.object().filter(|d| d.deletion().is_none());
        let owner = dependent.and_then(|d| d.owner());
        let (Some(dependent), Some(owner)) = (dependent, owner) else {
            self.forget(ctx.key());
            return Ok(Action::Done);
        };
        let cached = self.owner_cache.as_ref().and_then(|c| c.get(&owner));
        if cached.is_some() || self.keep_orphans {
            self.forget(ctx.key());
            return Ok(Action::Done);
        }
        let wait = self.remaining_grace(ctx.key());
        if !wait.is_zero() {
            return Ok(Action::RequeueAfter(wait));
        }
        let dependent = Arc::clone(dependent);
        self.collect(&ctx, &dependent, &owner).await
    }
}
