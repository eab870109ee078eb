//! What a controller observes, and where it comes from.
//!
//! An [`Object`] is one item of state: a pod, a DNS record, a thermostat's
//! reading. It has a user-chosen key (same key ⇒ same object identity) and a
//! [`Revision`] that changes whenever the object changes.
//!
//! A [`Source`] is a system that holds objects of one type and can report
//! them: [`Source::list`] returns a consistent [`Snapshot`] at a revision, and
//! [`Source::watch`] returns every [`Change`] after a revision, in order. The
//! [`Informer`](crate::Informer) turns a source into an up-to-date cache.
//!
//! Two backends ship with the crate: [`memory`] (an in-process store with
//! revisions, optimistic concurrency, watch history, compaction and fault
//! injection; the embedded default) and [`poll`] (for systems that can only
//! be listed). With the `dir` feature, [`dir`] reads objects from the files
//! of a directory and watches it with OS file notifications.
//!

#[cfg(feature = "dir")]
pub mod dir;
mod lifecycle;
pub mod memory;
pub mod poll;

use std::error::Error as StdError;
use std::fmt::{self, Debug, Display};
use std::hash::Hash;

use async_trait::async_trait;

use crate::key::QueueKey;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

pub use self::lifecycle::{Deletion, Lifecycle};

/// A position in a source's history: the number of the write that produced a
/// state.
///
/// Revisions only grow. [`Revision::ZERO`] is "before any write".
///
/// A source numbers its writes with one global, increasing [`Revision`] (as
/// etcd does). An object's [`Object::version`] is the revision of the write
/// that produced it, so versions of one object only grow, and versions of
/// different objects can be compared. The informer relies on this to ignore
/// stale changes: a change whose revision is not newer than the cached
/// object's is never applied.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Revision(u64);

impl Revision {
    /// The revision before any write.
    pub const ZERO: Self = Self(0);

    /// Wraps a raw revision number.
    #[must_use]
    pub const fn new(revision: u64) -> Self {
        Self(revision)
    }

    /// The raw revision number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(&self.0, f)
    }
}

impl From<u64> for Revision {
    fn from(revision: u64) -> Self {
        Self(revision)
    }
}

/// One item of state that a controller observes.
///
/// This trait is the one place where the bounds every part of tend needs are
/// bundled: objects are cloned into caches and shared across threads.
///
/// Implementing it takes a key and a version field:
///
/// ```
/// use tend::{Object, ObjectKey, Revision};
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Pod {
///     namespace: String,
///     name: String,
///     node: Option<String>,
///     version: Revision,
/// }
///
/// impl Object for Pod {
///     type Key = ObjectKey;
///
///     fn key(&self) -> ObjectKey {
///         ObjectKey::new(&self.namespace, &self.name)
///     }
///
///     fn version(&self) -> Revision {
///         self.version
///     }
///
///     fn set_version(&mut self, version: Revision) {
///         self.version = version;
///     }
/// }
/// ```
///
/// # Versions
///
/// Backends assign versions: on every write they call
/// [`set_version`](Object::set_version) with the revision of that write. A
/// version of [`Revision::ZERO`] means "never stored". Objects handed to a
/// source's write methods carry the version the writer last read, which is
/// how the [`memory`] backend detects conflicting writes.
///
/// # Generations
///
/// A generation changes only when an object's *spec* (its desired part)
/// changes, not when its status does; predicates use it to skip status-only
/// updates. Types that want one override [`generation`](Object::generation),
/// [`set_generation`](Object::set_generation) and
/// [`spec_changed`](Object::spec_changed); backends that support generations
/// set 1 on create and bump it on every update whose spec changed.
///
/// # Finalizers
///
/// Types that support finalizers (cleanup that must run before an object
/// goes, exactly once across restarts) keep a [`Lifecycle`] and override
/// [`lifecycle`](Object::lifecycle) and
/// [`lifecycle_mut`](Object::lifecycle_mut); the default (`None`) means the
/// type has none and a delete removes the object at once.
pub trait Object: Clone + Send + Sync + 'static {
    /// The identity of an object: two objects with the same key are two
    /// states of the same thing.
    type Key: QueueKey;

    /// This object's key.
    fn key(&self) -> Self::Key;

    /// The revision of the write that produced this state
    /// ([`Revision::ZERO`] when never stored).
    fn version(&self) -> Revision;

    /// Sets the version; called by backends on every write.
    fn set_version(&mut self, version: Revision);

    /// The generation, if this type tracks one (default: `None`).
    fn generation(&self) -> Option<u64> {
        None
    }

    /// Sets the generation; called by backends when this type tracks one
    /// (default: does nothing).
    fn set_generation(&mut self, generation: u64) {
        let _ = generation;
    }

    /// Whether this object's spec differs from `old`'s (default: `false`,
    /// the generation never moves after create).
    fn spec_changed(&self, old: &Self) -> bool {
        let _ = old;
        false
    }

    /// The finalizers and deletion mark, if this type supports finalizers
    /// (default: `None`).
    fn lifecycle(&self) -> Option<&Lifecycle> {
        None
    }

    /// The finalizers and deletion mark, to change them (default: `None`,
    /// as [`lifecycle`](Object::lifecycle)).
    fn lifecycle_mut(&mut self) -> Option<&mut Lifecycle> {
        None
    }

    /// The finalizers, if this type supports them (default: the
    /// [`lifecycle`](Object::lifecycle)'s). Backends and the client's
    /// finalizer helpers go through this and the three below, so a type
    /// that keeps its finalizers elsewhere (a Kubernetes object's
    /// `metadata`) overrides these four instead of keeping a [`Lifecycle`].
    /// (Not `finalizers`: kube-rs's `ResourceExt` has a method of that
    /// name, and both traits are often in scope.)
    fn finalizer_names(&self) -> Option<&[String]> {
        self.lifecycle().map(Lifecycle::finalizers)
    }

    /// The finalizers, to change them (default: the lifecycle's; `None`
    /// when the type has none).
    fn finalizer_names_mut(&mut self) -> Option<&mut Vec<String>> {
        self.lifecycle_mut().map(Lifecycle::finalizers_mut)
    }

    /// When a delete was asked for, if this object is being deleted (it
    /// waits for its finalizers to be removed).
    fn deletion(&self) -> Option<Deletion> {
        self.lifecycle().and_then(Lifecycle::deletion)
    }

    /// Sets or clears the deletion mark; called by backends (default: the
    /// lifecycle's, and nothing for a type without finalizers).
    fn set_deletion(&mut self, deletion: Option<Deletion>) {
        if let Some(lifecycle) = self.lifecycle_mut() {
            lifecycle.set_deletion(deletion);
        }
    }
}

/// Implements [`Object`] for a struct whose key is a field (cloned) and whose
/// version is a [`Revision`] field: the common case, in one line.
///
/// ```
/// #[derive(Clone, Debug)]
/// struct Pod {
///     name: String,
///     node: String,
///     version: tend::Revision,
/// }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// use tend::Object;
/// let pod = Pod { name: "web-1".into(), node: "n1".into(), version: tend::Revision::ZERO };
/// assert_eq!(pod.key(), "web-1");
/// ```
///
/// With `lifecycle: field`, the type supports finalizers, kept in a
/// [`Lifecycle`] field:
///
/// ```
/// #[derive(Clone, Debug)]
/// struct Volume {
///     name: String,
///     lifecycle: tend::Lifecycle,
///     version: tend::Revision,
/// }
/// tend::impl_object!(Volume, key: name: String, version: version, lifecycle: lifecycle);
/// ```
///
/// Types with a generation implement [`Object`] by hand.
#[macro_export]
macro_rules! impl_object {
    ($type:ty, key: $key:ident: $key_type:ty, version: $version:ident) => {
        $crate::impl_object!(@impl $type, $key, $key_type, $version, {});
    };
    ($type:ty, key: $key:ident: $key_type:ty, version: $version:ident, lifecycle: $lifecycle:ident) => {
        $crate::impl_object!(@impl $type, $key, $key_type, $version, {
            fn lifecycle(&self) -> ::std::option::Option<&$crate::Lifecycle> {
                ::std::option::Option::Some(&self.$lifecycle)
            }
            fn lifecycle_mut(&mut self) -> ::std::option::Option<&mut $crate::Lifecycle> {
                ::std::option::Option::Some(&mut self.$lifecycle)
            }
        });
    };
    (@impl $type:ty, $key:ident, $key_type:ty, $version:ident, { $($extra:tt)* }) => {
        impl $crate::Object for $type {
            type Key = $key_type;
            fn key(&self) -> $key_type {
                ::std::clone::Clone::clone(&self.$key)
            }
            fn version(&self) -> $crate::Revision {
                self.$version
            }
            fn set_version(&mut self, version: $crate::Revision) {
                self.$version = version;
            }
            $($extra)*
        }
    };
}

/// A ready-made Kubernetes-style key: a name within a namespace.
///
/// Displays as `namespace/name`, or `name` when the namespace is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// The name, unique within the namespace.
    pub name: String,
}

impl ObjectKey {
    /// A key for `name` in `namespace`.
    #[must_use]
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A key for a cluster-scoped object (empty namespace).
    #[must_use]
    pub fn cluster(name: impl Into<String>) -> Self {
        Self::new(String::new(), name)
    }
}

impl Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A consistent view of every object in a source at one revision.
#[derive(Debug, Clone)]
pub struct Snapshot<O> {
    /// Every object, in no particular order, each with its version set.
    pub objects: Vec<O>,
    /// The revision this snapshot was taken at: a watch from it delivers
    /// every later change.
    pub revision: Revision,
}

/// One entry of a watch stream.
#[derive(Debug, Clone)]
pub enum Change<O: Object> {
    /// The object was created or updated; its version is the revision of the
    /// write.
    Applied(O),
    /// The object with this key was deleted at `revision`.
    Deleted {
        /// The key of the deleted object.
        key: O::Key,
        /// The revision of the deletion.
        revision: Revision,
    },
    /// Nothing to report up to this revision: the watcher may resume from
    /// here (a progress notification, as in etcd and Kubernetes).
    Bookmark(Revision),
}

impl<O: Object> Change<O> {
    /// The revision this change brings its watcher to.
    #[must_use]
    pub fn revision(&self) -> Revision {
        match self {
            Self::Applied(object) => object.version(),
            Self::Deleted { revision, .. } | Self::Bookmark(revision) => *revision,
        }
    }
}

/// The stream a [`Source::watch`] returns.
pub type WatchStream<O> = BoxStream<'static, Result<Change<O>, SourceError>>;

/// A boxed error from a source's underlying system.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a [`Source`] call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The requested revision is no longer available (the source compacted
    /// its history past it): the caller must list again.
    #[error("revision {requested} has expired (history starts after {compacted}): relist")]
    Expired {
        /// The revision the caller asked to watch from.
        requested: Revision,
        /// The latest revision the source no longer has history for.
        compacted: Revision,
    },
    /// The source could not serve the call now; retrying later may succeed.
    #[error("source unavailable")]
    Unavailable(#[source] BoxError),
}

impl SourceError {
    /// A transient failure caused by `error`.
    pub fn unavailable(error: impl Into<BoxError>) -> Self {
        Self::Unavailable(error.into())
    }

    /// The history needed to watch from `requested` is gone: the source has
    /// compacted it up to `compacted`. The informer lists again.
    #[must_use]
    pub fn expired(requested: Revision, compacted: Revision) -> Self {
        Self::Expired {
            requested,
            compacted,
        }
    }

    /// Whether the caller must list again (rather than retry the watch).
    #[must_use]
    pub fn is_expired(&self) -> bool {
        matches!(self, Self::Expired { .. })
    }
}

/// A system that holds objects of one type and reports them.
///
/// Implement this to plug any system into tend. The contract:
///
/// 1. [`list`](Source::list) returns every object at one revision `R`
///    (a consistent snapshot), each object's version set: the revision of
///    the write that produced it, so a changed object always carries a
///    greater version than its previous state (the informer ignores a change
///    whose version is not greater than the cached one's).
/// 2. [`watch(R)`](Source::watch) returns a stream that delivers **every**
///    change with a revision greater than `R`, **in revision order**, each
///    exactly once — or ends, or yields an error. After an error the stream
///    may still be polled but the informer drops it.
/// 3. A stream may end or fail at any time (a dropped connection, a server
///    timeout): the caller resumes with `watch(last revision it saw)`.
/// 4. When the source no longer has the history to serve `watch(R)`, it
///    fails (from `watch` or from the stream) with [`SourceError::Expired`];
///    the caller lists again.
/// 5. [`Change::Bookmark`] may be sent at any time to say "no changes up to
///    here"; it lets the caller resume from a later revision.
///
/// A source that breaks rule 2 (loses or reorders changes) leaves the
/// informer's cache wrong until the next list; the informer's relist timer
/// exists to repair such sources.
///
/// The trait is object safe: the informer holds an
/// `Arc<dyn Source<Object = O>>`. Implement it with the
/// [`async_trait`](crate::async_trait) attribute (re-exported by tend):
/// without it the compiler reports a mismatch of lifetimes (E0195).
///
/// # Examples
///
/// A source over an in-process log of readings: `list` replays the log into
/// a snapshot, and `watch` streams the entries after a revision, then every
/// new one as it is recorded (a broadcast channel stands for a server's
/// watch). The log never compacts, so no revision expires; a source that
/// drops history answers [`SourceError::expired`] for revisions it lost.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use futures::StreamExt;
/// use tend::{Change, Informer, Revision, Snapshot, Source, SourceError, WatchStream};
/// use tokio::sync::broadcast;
///
/// #[derive(Clone, Debug)]
/// struct Reading { sensor: String, celsius: f64, version: Revision }
/// tend::impl_object!(Reading, key: sensor: String, version: version);
///
/// /// Readings appended to a log; revision n is the n-th entry.
/// #[derive(Clone)]
/// struct Readings { log: Arc<Mutex<Vec<Reading>>>, new: broadcast::Sender<Reading> }
///
/// impl Readings {
///     fn new() -> Self {
///         Self { log: Arc::default(), new: broadcast::channel(1024).0 }
///     }
///
///     fn record(&self, sensor: &str, celsius: f64) {
///         let mut log = self.log.lock().unwrap();
///         let version = Revision::new(log.len() as u64 + 1);
///         let reading = Reading { sensor: sensor.into(), celsius, version };
///         log.push(reading.clone());
///         let _ = self.new.send(reading); // no watcher: nobody to tell
///     }
/// }
///
/// #[tend::async_trait]
/// impl Source for Readings {
///     type Object = Reading;
///
///     fn name(&self) -> &str { "readings" }
///
///     async fn list(&self) -> Result<Snapshot<Reading>, SourceError> {
///         let log = self.log.lock().unwrap();
///         let mut latest = std::collections::HashMap::new();
///         for reading in log.iter() {
///             latest.insert(reading.sensor.clone(), reading.clone());
///         }
///         let revision = Revision::new(log.len() as u64);
///         Ok(Snapshot { objects: latest.into_values().collect(), revision })
///     }
///
///     async fn watch(&self, from: Revision) -> Result<WatchStream<Reading>, SourceError> {
///         // Subscribed under the log's lock: no entry falls between the
///         // replay and the live stream.
///         let log = self.log.lock().unwrap();
///         let live = self.new.subscribe();
///         let start = usize::try_from(from.get()).unwrap_or(usize::MAX).min(log.len());
///         let past: Vec<_> = log[start..].iter().cloned().map(Change::Applied).map(Ok).collect();
///         // A watcher too slow for the channel ends its stream; the
///         // informer then resumes from the last revision it saw.
///         let live = futures::stream::unfold(live, |mut live| async move {
///             let reading = live.recv().await.ok()?;
///             Some((Ok(Change::Applied(reading)), live))
///         });
///         Ok(futures::stream::iter(past).chain(live).boxed())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let readings = Readings::new();
/// readings.record("hall", 19.5);
/// let informer = Informer::builder(readings.clone()).build()?;
/// let stop = tend::CancellationToken::new();
/// let run = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// let store = informer.store();
/// store.wait_synced(std::time::Duration::from_secs(5)).await?;
/// assert_eq!(store.get(&"hall".to_owned()).unwrap().celsius, 19.5);
///
/// readings.record("hall", 20.0); // reaches the cache through the watch
/// tokio::time::timeout(std::time::Duration::from_secs(5), async {
///     while store.get(&"hall".to_owned()).unwrap().celsius != 20.0 {
///         tokio::task::yield_now().await;
///     }
/// })
/// .await?;
/// stop.cancel();
/// run.await??;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// The type of the objects this source holds.
    type Object: Object;

    /// A short name for logs, errors and metrics (e.g. `"pods"`).
    fn name(&self) -> &str;

    /// Every object, at one revision.
    ///
    /// # Errors
    ///
    /// [`SourceError::Unavailable`] when the source cannot be read now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the list.
    async fn list(&self) -> Result<Snapshot<Self::Object>, SourceError>;

    /// Every change after `from`, in order (see the trait docs).
    ///
    /// # Errors
    ///
    /// [`SourceError::Expired`] when `from` is older than the source's
    /// history; [`SourceError::Unavailable`] when the watch cannot be opened
    /// now. The stream itself yields the same errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the watch.
    async fn watch(&self, from: Revision) -> Result<WatchStream<Self::Object>, SourceError>;
}

/// `error: source: source…` for logs.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
