//! Writing: one client for every backend.
//!
//! A [`Client`] reads and writes the objects of one source through its
//! backend, with the same semantics on every backend: [`get`](Client::get)
//! and [`list`](Client::list) are live reads (not the informer's cache),
//! [`create`](Client::create), [`update`](Client::update) (optimistic: the
//! object carries the version it was read at, a stale one is a
//! [`ClientError::Conflict`] and writes nothing) and
//! [`delete`](Client::delete) / [`delete_at`](Client::delete_at). On top
//! of them, [`modify`](Client::modify) (re-read and retry on conflict) and
//! [`create_or_update`](Client::create_or_update) report what they did as
//! an [`Effect`].
//!
//! Code written against a `Client` runs unchanged on the memory backend
//! ([`MemoryStore::client`](crate::memory::MemoryStore::client)) and on etcd
//! (`EtcdSource::client`, feature `etcd`); errors are one type,
//! [`ClientError`], on both.
//!
//! # Finalizers
//!
//! For types with a [`Lifecycle`](crate::Lifecycle), every backend applies
//! Kubernetes' rules: a delete of an object with finalizers only marks it
//! ([`Object::deletion`], a write at a new revision), no finalizer can be
//! added to a marked object ([`ClientError::BeingDeleted`]), and the write
//! that leaves a marked object without finalizers removes it.
//! [`add_finalizer`](Client::add_finalizer) and
//! [`remove_finalizer`](Client::remove_finalizer) are idempotent. On etcd,
//! updates and deletes of such types read the object first (one more
//! round trip), compared at that version in the write's transaction.
//!
//! # Fencing
//!
//! [`Client::fenced`] returns a handle whose writes carry a fencing token:
//! each is made only if the token is still current, checked atomically with
//! the write against the backend's fencing authority (on etcd the
//! election's leader key, compared in the write's transaction; on memory a
//! [`Fencing`] authority, checked under the store's lock). A deposed
//! leader's write fails with [`ClientError::Fenced`] and changes nothing.
//!
//! The module knows only [`source`](crate::Object): backends depend on it,
//! not the other way round.

mod backend;
mod error;
mod fencing;
mod finalizers;
mod helpers;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use futures::future::BoxFuture;

pub use self::backend::{Backend, KeyOf};
pub use self::error::ClientError;
pub use self::fencing::{Fences, Fencing, FencingToken};
pub(crate) use self::finalizers::{Delete, Update, created, deleted, keep_mark, updated};
pub use self::helpers::{Effect, Written};
use crate::object::{Object, Revision};
use crate::source::Snapshot;

/// Attempts [`Client::modify`] and [`Client::create_or_update`] make
/// before [`ClientError::TooManyConflicts`], unless told otherwise
/// ([`Client::conflict_attempts`]); client-go's `retry.DefaultRetry` also
/// makes 5.
pub const DEFAULT_CONFLICT_ATTEMPTS: NonZeroU32 = NonZeroU32::new(5).unwrap();

/// Reads and writes the objects of one source; a cheap cloneable handle
/// (an `Arc` and two words), usable in a reconcile, a test, a seeding
/// script or a CLI alike.
///
/// See the [module docs](self).
///
/// # Examples
///
/// The same code on the memory backend here runs on etcd with
/// `EtcdSource::client()` in place of [`MemoryStore::client`](crate::memory::MemoryStore::client):
///
/// ```
/// use tend::client::{Client, ClientError, Effect};
/// use tend::memory::MemoryStore;
/// use tend::Revision;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Light { room: String, on: bool, version: Revision }
/// tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ClientError> {
/// let lights: Client<Light> = MemoryStore::new("lights").client();
/// let hall = lights.create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
///
/// // Optimistic concurrency: a write from a stale read is refused.
/// let mut on = hall.clone();
/// on.on = true;
/// lights.update(on).await?;
/// let error = lights.update(hall).await.unwrap_err();
/// assert!(error.is_conflict());
///
/// // `modify` reads, applies the change and retries on conflict.
/// let off = lights.modify(&"hall".to_owned(), |light| light.on = false).await?;
/// assert_eq!(off.effect, Effect::Updated);
/// assert!(!lights.get(&"hall".to_owned()).await?.unwrap().on);
/// # Ok(()) }
/// ```
pub struct Client<O: Object> {
    backend: Arc<dyn Backend<Object = O>>,
    token: Option<FencingToken>,
    attempts: NonZeroU32,
    /// Told how each write ended (a reconcile's client: read-your-writes
    /// and the count of fenced writes refused).
    hook: Option<Arc<dyn WriteHook>>,
}

/// Told how every write a client made ended: the revision it landed at,
/// its refusal for a stale fencing token, or that nobody knows.
pub(crate) trait WriteHook: Send + Sync {
    /// A write landed at `revision`.
    fn wrote(&self, revision: Revision);

    /// A write was refused with [`ClientError::Fenced`].
    fn refused(&self);

    /// A write may or may not have landed ([`ClientError::Unavailable`]);
    /// `head` reads the backend's newest revision, which it cannot exceed.
    fn unsure(&self, head: Arc<dyn Head>) {
        let _ = head;
    }
}

/// A backend's [`head`](Backend::head), its object type erased.
pub(crate) trait Head: Send + Sync {
    fn head(&self) -> BoxFuture<'_, Result<Option<Revision>, ClientError>>;
}

struct BackendHead<O: Object>(Arc<dyn Backend<Object = O>>);

impl<O: Object> Head for BackendHead<O> {
    fn head(&self) -> BoxFuture<'_, Result<Option<Revision>, ClientError>> {
        self.0.head()
    }
}

impl<O: Object> Clone for Client<O> {
    fn clone(&self) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            token: self.token,
            attempts: self.attempts,
            hook: self.hook.clone(),
        }
    }
}

impl<O: Object> fmt::Debug for Client<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.backend.name())
            .field("token", &self.token)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl<O: Object> Client<O> {
    /// A client over `backend`, unfenced. Backends offer their own
    /// constructors (`client()`); this one is for your own [`Backend`]s.
    pub fn new(backend: impl Backend<Object = O>) -> Self {
        Self {
            backend: Arc::new(backend),
            token: None,
            attempts: DEFAULT_CONFLICT_ATTEMPTS,
            hook: None,
        }
    }

    /// A handle to the same backend that tells `hook` of each write.
    pub(crate) fn hooked(&self, hook: Arc<dyn WriteHook>) -> Self {
        Self {
            hook: Some(hook),
            ..self.clone()
        }
    }

    /// Tells the hook how a write ended: where it landed (`revision` of
    /// what it returned), that it was fenced, or that its outcome is
    /// unknown. Every write goes through
    /// here; the helpers (`modify`, the finalizers') write through the
    /// methods that call it.
    fn ended<T>(
        &self,
        written: Result<T, ClientError>,
        revision: impl FnOnce(&T) -> Revision,
    ) -> Result<T, ClientError> {
        if let Some(hook) = &self.hook {
            match &written {
                Ok(value) => hook.wrote(revision(value)),
                Err(ClientError::Fenced { .. }) => hook.refused(),
                Err(ClientError::Unavailable { .. }) => {
                    hook.unsure(Arc::new(BackendHead(Arc::clone(&self.backend))));
                }
                Err(_) => {}
            }
        }
        written
    }

    /// The backend's name (its source's).
    #[must_use]
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// A handle to the same backend whose writes carry the fencing token
    /// `token` (for instance a reconcile's
    /// [`Context::fencing_token`](crate::controller::Context::fencing_token)):
    /// each write is made only if `token` is still current, else
    /// [`ClientError::Fenced`] and nothing written. The backend must have a
    /// fencing authority (`client_fenced_by` on memory and etcd), or every
    /// write fails with [`ClientError::NoFencing`].
    #[must_use]
    pub fn fenced(&self, token: FencingToken) -> Self {
        Self {
            token: Some(token),
            ..self.clone()
        }
    }

    /// A handle to the same backend whose writes carry no fencing token.
    #[must_use]
    pub fn unfenced(&self) -> Self {
        Self {
            token: None,
            ..self.clone()
        }
    }

    /// The fencing token this handle's writes carry.
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        self.token
    }

    /// Whether writes with a fencing token can succeed: the backend has a
    /// fencing authority (on memory and etcd, a client made by
    /// `client_fenced_by`). A controller that runs with fencing tokens
    /// (leader-only or sharded) refuses a client for which this is `false`.
    #[must_use]
    pub fn can_fence(&self) -> bool {
        self.backend.fences()
    }

    /// Sets how many attempts [`modify`](Self::modify) and
    /// [`create_or_update`](Self::create_or_update) make (default
    /// [`DEFAULT_CONFLICT_ATTEMPTS`]).
    #[must_use]
    pub fn conflict_attempts(mut self, attempts: NonZeroU32) -> Self {
        self.attempts = attempts;
        self
    }

    /// The object stored under `key` now, read from the backend (not from
    /// an informer's cache).
    ///
    /// # Errors
    ///
    /// [`ClientError::Unavailable`]; [`ClientError::Invalid`] when the key
    /// has no form in the backend or the stored value cannot be decoded.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn get(&self, key: &O::Key) -> Result<Option<O>, ClientError> {
        self.backend.get(key).await
    }

    /// Every object stored now, at one revision, read from the backend.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unavailable`]; as any call, [`ClientError::RetryLater`]
    /// (on Kubernetes a `429`) or [`ClientError::Forbidden`] (a `403`: the
    /// caller may not list).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn list(&self) -> Result<Snapshot<O>, ClientError> {
        self.backend.list().await
    }

    /// Stores a new object; returns it with its version set (and, for
    /// types with one, generation 1 on the memory backend).
    ///
    /// # Errors
    ///
    /// [`ClientError::AlreadyExists`] when the key is taken;
    /// [`ClientError::Fenced`], [`ClientError::NoFencing`],
    /// [`ClientError::Invalid`], [`ClientError::Unavailable`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn create(&self, object: O) -> Result<O, ClientError> {
        let created = self.backend.create(object, self.token).await;
        self.ended(created, O::version)
    }

    /// Replaces a stored object provided `object`'s version is the stored
    /// one; returns it with its new version set. An update that leaves an
    /// object being deleted without finalizers removes it (returned marked,
    /// without finalizers, at the revision of the delete).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`]; [`ClientError::Conflict`] when
    /// `object.version()` is stale; [`ClientError::BeingDeleted`] when it
    /// adds a finalizer to an object being deleted; [`ClientError::Fenced`],
    /// [`ClientError::NoFencing`], [`ClientError::Invalid`],
    /// [`ClientError::Unavailable`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn update(&self, object: O) -> Result<O, ClientError> {
        let updated = self.backend.update(object, self.token).await;
        self.ended(updated, O::version)
    }

    /// Writes only the status of a stored object (Kubernetes' `status`
    /// subresource: the spec and metadata written are ignored), provided
    /// `object`'s version is the stored one, as [`update`](Self::update).
    /// On backends that store objects whole (memory, etcd) it is an
    /// [`update`](Self::update).
    ///
    /// # Errors
    ///
    /// As [`update`](Self::update).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn update_status(&self, object: O) -> Result<O, ClientError> {
        let updated = self.backend.update_status(object, self.token).await;
        self.ended(updated, O::version)
    }

    /// Server-side apply: `object` states the fields the field manager
    /// `manager` owns; the server merges them into the stored object
    /// (creating it if absent) and takes over fields other managers own
    /// (`force`), without a version check. Kubernetes only.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unsupported`] on other backends; else as
    /// [`update`](Self::update) but [`Conflict`](ClientError::Conflict).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn apply(&self, object: O, manager: &str) -> Result<O, ClientError> {
        let applied = self.backend.apply(object, manager, self.token).await;
        self.ended(applied, O::version)
    }

    /// Deletes the object stored under `key`, whatever its version;
    /// returns the revision of the delete. An object with finalizers is
    /// only marked (see [Finalizers](self#finalizers)): the revision of
    /// the mark, or its version when it was marked already (nothing
    /// written).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`], [`ClientError::Fenced`],
    /// [`ClientError::NoFencing`], [`ClientError::Invalid`],
    /// [`ClientError::Unavailable`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have deleted the object.
    pub async fn delete(&self, key: &O::Key) -> Result<Revision, ClientError> {
        let deleted = self.backend.delete(key, None, self.token).await;
        self.ended(deleted, |revision| *revision)
    }

    /// Deletes the object stored under `key` provided its version is
    /// `version`; returns the revision of the delete (or of the mark, as
    /// [`delete`](Self::delete)).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`]; [`ClientError::Conflict`] when `version`
    /// is stale; [`ClientError::Fenced`], [`ClientError::NoFencing`],
    /// [`ClientError::Invalid`], [`ClientError::Unavailable`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have deleted the object.
    pub async fn delete_at(
        &self,
        key: &O::Key,
        version: Revision,
    ) -> Result<Revision, ClientError> {
        let deleted = self.backend.delete(key, Some(version), self.token).await;
        self.ended(deleted, |revision| *revision)
    }
}
