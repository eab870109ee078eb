//! Where objects come from: the [`Source`] contract.
//!
//! A [`Source`] is a system that holds objects of one type and can report
//! them: [`Source::list`] returns a consistent [`Snapshot`] at a revision, and
//! [`Source::watch`] returns every [`Change`] after a revision, in order. The
//! [`Informer`](crate::Informer) turns a source into an up-to-date cache.
//! The backends ([`memory`](crate::memory), [`poll`](crate::poll),
//! [`dir`](crate::dir), [`etcd`](crate::etcd), [`kube`](crate::kube))
//! implement it.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::BoxError;
use crate::object::{Object, Revision};

/// A consistent view of every object in a source at one revision.
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryStore;
/// use tend::{Revision, Snapshot, Source};
///
/// #[derive(Clone, Debug)]
/// struct Light { room: String, on: bool, version: Revision }
/// tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::SourceError> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), on: false, version: Revision::ZERO });
/// store.put(Light { room: "attic".into(), on: true, version: Revision::ZERO });
///
/// let Snapshot { objects, revision } = store.list().await?;
/// assert_eq!(objects.len(), 2);
/// assert_eq!(revision, Revision::new(2)); // a watch from here misses nothing
/// assert!(objects.iter().all(|light| light.version <= revision));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Snapshot<O> {
    /// Every object, in no particular order, each with its version set.
    pub objects: Vec<O>,
    /// The revision this snapshot was taken at: a watch from it delivers
    /// every later change.
    pub revision: Revision,
}

/// One entry of a watch stream.
///
/// # Examples
///
/// A watch from [`Revision::ZERO`] replays a memory store's history:
///
/// ```
/// use futures::StreamExt;
/// use tend::memory::MemoryStore;
/// use tend::{Change, Revision, Source};
///
/// #[derive(Clone, Debug)]
/// struct Light { room: String, on: bool, version: Revision }
/// tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), on: false, version: Revision::ZERO });
/// store.client().delete(&"hall".to_owned()).await?;
///
/// let mut changes = store.watch(Revision::ZERO).await?; // every change after 0
/// let created = changes.next().await.unwrap()?;
/// assert!(matches!(&created, Change::Applied(light) if light.room == "hall"));
/// let deleted = changes.next().await.unwrap()?;
/// assert!(matches!(&deleted, Change::Deleted { key, .. } if key == "hall"));
/// assert_eq!((created.revision(), deleted.revision()), (Revision::new(1), Revision::new(2)));
/// # Ok(()) }
/// ```
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

/// Why a [`Source`] call failed.
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryStore;
/// use tend::{Revision, Source, SourceError};
///
/// #[derive(Clone, Debug)]
/// struct Light { room: String, version: Revision }
/// tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// store.compact(); // the history up to revision 1 is gone
/// let Err(error) = store.watch(Revision::ZERO).await else { unreachable!() };
/// assert!(error.is_expired()); // list again, then watch from the list's revision
///
/// // A source's own system failing: the informer backs off and retries.
/// let error = SourceError::unavailable(std::io::Error::other("connection reset"));
/// assert!(!error.is_expired());
/// assert_eq!(error.to_string(), "source unavailable");
/// # }
/// ```
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
/// let store = informer.cache();
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

    /// [`list`](Source::list), each object passed through `transform` (the
    /// informer's [transform](crate::InformerBuilder::transform)): what the
    /// informer calls when it has one. The default lists, then transforms;
    /// a source that reads in pages or as a stream (Kubernetes) transforms
    /// each object as it arrives, so that the whole list never exists
    /// untransformed at once.
    ///
    /// # Errors
    ///
    /// As [`list`](Source::list).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the list.
    async fn list_transformed(
        &self,
        transform: &(dyn Fn(Self::Object) -> Self::Object + Send + Sync),
    ) -> Result<Snapshot<Self::Object>, SourceError> {
        let Snapshot { objects, revision } = self.list().await?;
        let objects = objects.into_iter().map(transform).collect();
        Ok(Snapshot { objects, revision })
    }

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

    /// The source's newest revision now (its head), or `None` when it
    /// cannot tell (the default). The informer asks every
    /// [probe period](crate::InformerBuilder::lag_probe_every) and compares
    /// it with the newest revision its cache has seen, to tell how far the
    /// cache is behind ([`CacheLag`](crate::CacheLag)). Answer with one cheap
    /// request: it is made again and again. A head that counts changes the
    /// watch never delivers (a revision shared with other data) shows as a
    /// lag until a bookmark moves the cache past it.
    ///
    /// # Errors
    ///
    /// [`SourceError::Unavailable`] when the source cannot be read now (the
    /// informer keeps the last head it had, and asks again next period).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request.
    async fn head(&self) -> Result<Option<Revision>, SourceError> {
        Ok(None)
    }
}
