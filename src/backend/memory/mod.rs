//! The embedded default backend: an in-process store of objects of one type.
//!
//! A [`MemoryStore`] behaves like a small etcd for one object type: every
//! write gets the next global [`Revision`], updates and deletes can name the
//! version they expect (optimistic concurrency: a stale version fails with
//! [`ClientError::Conflict`](crate::client::ClientError::Conflict) and changes
//! nothing), fenced writes are checked against a [`Fencing`](crate::client::Fencing) authority,
//! generations move on spec
//! changes, and a bounded history of changes serves watches from any revision
//! still inside it. Watching from a compacted revision fails with
//! [`SourceError::Expired`].
//!
//! It is a [`Source`] itself, so an [`Informer`](crate::Informer) can watch
//! it directly. For tests it injects faults on demand, seeded and
//! reproducible: dropped, duplicated and reordered watch events, watches cut
//! after N events ([`Faults`]), failing lists
//! ([`fail_next_lists`](MemoryStore::fail_next_lists)) and compaction
//! ([`compact`](MemoryStore::compact)). It counts list and watch calls
//! ([`stats`](MemoryStore::stats)).
//!
//! Writes go through a [`Client`](crate::client::Client) ([`client`](MemoryStore::client), or
//! [`client_fenced_by`](MemoryStore::client_fenced_by) for fenced writes),
//! the same type as on every other backend; its calls complete at once.
//!
//! ```
//! use tend::client::ClientError;
//! use tend::memory::MemoryStore;
//! use tend::{Object, Revision};
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Light { room: String, on: bool, version: Revision }
//!
//! impl Object for Light {
//!     type Key = String;
//!     fn key(&self) -> String { self.room.clone() }
//!     fn version(&self) -> Revision { self.version }
//!     fn set_version(&mut self, version: Revision) { self.version = version; }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ClientError> {
//! let store = MemoryStore::new("lights");
//! let lights = store.client();
//! let mut light = lights.create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
//! let stale = light.clone();
//! light.on = true;
//! lights.update(light).await?;
//! assert!(matches!(lights.update(stale).await, Err(ClientError::Conflict { .. })));
//! assert!(store.get(&"hall".to_owned()).unwrap().on);
//! # Ok(()) }
//! ```
//!
//! # Locking
//!
//! One mutex guards the objects, the revision and the history; it is never
//! held across an `.await`. A fenced write asks its [`Fencing`](crate::client::Fencing) authority
//! under it (so the check and the write are one step); the authority must
//! not write to the store. Watch streams read the history under it, up to
//! 256 changes at a time; writes wake a watch stream only when it sleeps.
//!
//! [`Source`]: crate::Source
//! [`SourceError::Expired`]: crate::SourceError::Expired

mod bell;
mod client;
mod election;
mod error;
mod faults;
mod membership;
mod source;
mod table;
mod watch;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub use self::election::{MemoryElection, MemoryElectionGroup};
pub use self::membership::{MemoryMembership, MemoryMembershipGroup};
pub use error::{FaultError, InjectedFault};
pub use faults::Faults;

use self::bell::Bell;
use self::table::Table;
use crate::object::{Object, Revision};
use crate::source::Snapshot;

/// The number of changes a store keeps for watches unless told otherwise.
pub const DEFAULT_HISTORY: NonZeroUsize = NonZeroUsize::new(100_000).unwrap();

/// An in-process store of objects of one type; a cheap cloneable handle.
///
/// See the [module docs](self).
///
/// # Examples
///
/// A store is a [`Source`](crate::Source) (an informer watches it) and a backend that a
/// [`Client`](crate::client::Client) writes to; [`put`](Self::put) writes
/// as an outside actor would (a simulation, a seed), whatever the version:
///
/// ```
/// # use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)]
/// # struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// use tend::memory::MemoryStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::client::ClientError> {
/// let store = MemoryStore::new("lights");
/// let hall = store.client().create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
/// store.put(Light { on: true, ..hall.clone() }); // someone flips the switch
/// assert!(store.client().update(hall).await.unwrap_err().is_conflict());
/// assert_eq!(store.len(), 1);
/// assert_eq!(store.revision(), Revision::new(2)); // two writes
/// # Ok(()) }
/// ```
pub struct MemoryStore<O: Object> {
    shared: Arc<Shared<O>>,
}

/// State shared by a store's handles and its watch streams.
struct Shared<O: Object> {
    name: Arc<str>,
    table: Mutex<Table<O>>,
    /// Rung on every write, bookmark and compaction.
    bell: Bell,
    faults: Mutex<Faults>,
    lists: AtomicU64,
    watches: AtomicU64,
}

/// Calls served by a [`MemoryStore`], as counted by
/// [`MemoryStore::stats`].
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryStore;
/// use tend::{Revision, Source};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::SourceError> {
/// let store = MemoryStore::<Light>::new("lights");
/// store.list().await?;
/// let _changes = store.watch(Revision::ZERO).await?;
/// let stats = store.stats();
/// assert_eq!((stats.lists, stats.watches), (1, 1)); // e.g. no relist happened
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryStats {
    /// Calls to [`Source::list`](crate::Source::list) (including failed ones).
    pub lists: u64,
    /// Calls to [`Source::watch`](crate::Source::watch) (including failed ones).
    pub watches: u64,
}

impl<O: Object> Clone for MemoryStore<O> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<O: Object> fmt::Debug for MemoryStore<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.shared.table.lock();
        f.debug_struct("MemoryStore")
            .field("name", &self.shared.name)
            .field("len", &table.len())
            .field("revision", &table.revision())
            .finish_non_exhaustive()
    }
}

impl<O: Object> MemoryStore<O> {
    /// An empty store named `name` keeping [`DEFAULT_HISTORY`] changes.
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self::with_history(name, DEFAULT_HISTORY)
    }

    /// An empty store named `name` keeping the last `history` changes for
    /// watches; older ones are compacted.
    #[must_use]
    pub fn with_history(name: impl Into<Arc<str>>, history: NonZeroUsize) -> Self {
        Self {
            shared: Arc::new(Shared {
                name: name.into(),
                table: Mutex::new(Table::new(history)),
                bell: Bell::default(),
                faults: Mutex::new(Faults::default()),
                lists: AtomicU64::new(0),
                watches: AtomicU64::new(0),
            }),
        }
    }

    /// Creates `object` with the same checks as [`Client::create`](crate::client::Client::create)
    /// (it must not exist; the finalizer rules apply), without an async
    /// runtime: the way to seed a store before one runs. Returns the object
    /// as stored, with its version set.
    ///
    /// ```
    /// use tend::client::ClientError;
    /// use tend::memory::MemoryStore;
    ///
    /// #[derive(Clone, Debug)]
    /// struct Room { name: String, version: tend::Revision }
    /// tend::impl_object!(Room, key: name: String, version: version);
    ///
    /// let store = MemoryStore::new("rooms");
    /// let hall = Room { name: "hall".into(), version: tend::Revision::ZERO };
    /// let stored = store.create(hall.clone()).unwrap();
    /// assert!(stored.version > tend::Revision::ZERO);
    /// assert!(matches!(store.create(hall), Err(ClientError::AlreadyExists { .. })));
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::create`](crate::client::Client::create) on this store.
    pub fn create(&self, object: O) -> Result<O, crate::client::ClientError> {
        use futures::FutureExt;
        // The memory client's calls complete at once, so one poll ends it;
        // no executor is entered, so this works inside any runtime too.
        self.client()
            .create(object)
            .now_or_never()
            .unwrap_or_else(|| {
                Err(crate::client::ClientError::unavailable(
                    &self.shared.name,
                    "the memory client's create did not complete at once",
                ))
            })
    }

    /// Creates or replaces an object whatever its version and without any
    /// check: a last-writer-wins write by an outside actor, for simulations
    /// (a user editing the desired state, a node changing a pod). To seed a
    /// store with a client's checks, use [`create`](Self::create);
    /// controllers write through a [`client`](Self::client). Returns the
    /// object with its new version set.
    pub fn put(&self, object: O) -> O {
        let stored = self.shared.table.lock().put(object);
        self.shared.bell.ring();
        stored
    }

    /// The object stored under `key`.
    #[must_use]
    pub fn get(&self, key: &O::Key) -> Option<O> {
        self.shared.table.lock().get(key).cloned()
    }

    /// Every object and the current revision (not counted as a list call,
    /// never fails).
    #[must_use]
    pub fn snapshot(&self) -> Snapshot<O> {
        self.shared.table.lock().snapshot()
    }

    /// The number of objects stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.table.lock().len()
    }

    /// Whether no object is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The revision of the latest write.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.shared.table.lock().revision()
    }

    /// The latest revision whose history is gone: watches must start at or
    /// after it.
    #[must_use]
    pub fn compacted(&self) -> Revision {
        self.shared.table.lock().compacted()
    }

    /// Forgets the whole history: every open watch that has not caught up,
    /// and every watch from an older revision, fails with
    /// [`SourceError::Expired`](crate::SourceError::Expired).
    pub fn compact(&self) {
        let mut table = self.shared.table.lock();
        let revision = table.revision();
        table.compact_to(revision);
        drop(table);
        self.shared.bell.ring();
    }

    /// Forgets the history up to `revision` (at most the current one).
    pub fn compact_to(&self, revision: Revision) {
        self.shared.table.lock().compact_to(revision);
        self.shared.bell.ring();
    }

    /// Sends a [`Change::Bookmark`](crate::Change::Bookmark) with the
    /// current revision to every open watch, once it has caught up.
    pub fn bookmark(&self) {
        self.shared.table.lock().bookmarks += 1;
        self.shared.bell.ring();
    }

    /// Makes the next `count` calls to [`Source::list`](crate::Source::list) fail with an
    /// [`InjectedFault::List`].
    pub fn fail_next_lists(&self, count: u32) {
        self.shared.table.lock().failing_lists = count;
    }

    /// Sets the faults injected into watches opened from now on
    /// (`Faults::default()` turns them off).
    ///
    /// # Errors
    ///
    /// [`FaultError`] when a probability is out of range; the previous
    /// configuration stays.
    pub fn set_faults(&self, faults: Faults) -> Result<(), FaultError> {
        faults.validate()?;
        *self.shared.faults.lock() = faults;
        Ok(())
    }

    /// The list and watch calls served so far.
    #[must_use]
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            lists: self.shared.lists.load(Ordering::Relaxed),
            watches: self.shared.watches.load(Ordering::Relaxed),
        }
    }
}
