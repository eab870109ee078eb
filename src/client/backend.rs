//! `Backend`: what a backend implements so that a [`Client`](super::Client)
//! can read and write through it.

use async_trait::async_trait;

use super::ClientError;
use crate::client::FencingToken;
use crate::object::{Object, Revision};
use crate::source::Snapshot;

/// The key type of a backend's objects.
pub type KeyOf<B> = <<B as Backend>::Object as Object>::Key;

/// A system that stores objects of one type and writes them with optimistic
/// concurrency and fencing; wrapped by a [`Client`](super::Client), which is
/// what users call.
///
/// The memory backend ([`MemoryStore::client`](crate::memory::MemoryStore::client))
/// and the etcd backend (`EtcdSource::client`, feature `etcd`) implement
/// it; implement it to plug in another system. The contract, the same on
/// every backend:
///
/// 1. Reads are live: [`get`](Backend::get) and [`list`](Backend::list)
///    ask the backend, never a cache.
/// 2. Every successful write makes one new revision, greater than any
///    before; [`create`](Backend::create) and [`update`](Backend::update)
///    return the object with its version set to it, [`delete`](Backend::delete)
///    returns it.
/// 3. [`update`](Backend::update) writes only if the object's
///    [`version`](Object::version) is the stored one, and
///    [`delete`](Backend::delete) only if the stored version is the one
///    given (when one is): otherwise [`ClientError::Conflict`].
/// 4. A write with a fencing token writes only if the token is current
///    (checked atomically with the write, against the backend's fencing
///    authority): otherwise [`ClientError::Fenced`]; a token given to a
///    backend without an authority is [`ClientError::NoFencing`].
/// 5. A refused write changes nothing.
/// 6. Types with finalizers ([`Object::finalizer_names`]) follow the finalizer
///    rules (see the [client's docs](super#finalizers)), checked
///    atomically with the write.
///
/// The Kubernetes backend (feature `kube`) cannot keep 4 atomically: its
/// fencing check is made just before the write is sent (see `tend::kube`).
///
/// # Cancel safety
///
/// Reads are cancel safe; dropping a write's future may or may not have
/// written.
///
/// # Examples
///
/// A read-only backend over flags compiled into the binary, behind the
/// same [`Client`](super::Client) as every other backend:
///
/// ```
/// use std::collections::BTreeMap;
/// use tend::client::{Backend, Client, ClientError, FencingToken};
/// use tend::{Revision, Snapshot};
/// # #[derive(Clone, Debug, PartialEq)] struct Flag { name: String, on: bool, version: Revision }
/// # tend::impl_object!(Flag, key: name: String, version: version);
///
/// struct Builtin(BTreeMap<String, Flag>);
///
/// #[tend::async_trait]
/// impl Backend for Builtin {
///     type Object = Flag;
///     fn name(&self) -> &str { "builtin-flags" }
///
///     async fn get(&self, key: &String) -> Result<Option<Flag>, ClientError> {
///         Ok(self.0.get(key).cloned())
///     }
///
///     async fn list(&self) -> Result<Snapshot<Flag>, ClientError> {
///         let objects = self.0.values().cloned().collect();
///         Ok(Snapshot { objects, revision: Revision::new(1) })
///     }
///
///     async fn create(&self, _: Flag, _: Option<FencingToken>) -> Result<Flag, ClientError> {
///         Err(read_only())
///     }
///
///     async fn update(&self, _: Flag, _: Option<FencingToken>) -> Result<Flag, ClientError> {
///         Err(read_only())
///     }
///
///     async fn delete(
///         &self,
///         _: &String,
///         _: Option<Revision>,
///         _: Option<FencingToken>,
///     ) -> Result<Revision, ClientError> {
///         Err(read_only())
///     }
/// }
///
/// fn read_only() -> ClientError {
///     ClientError::Unsupported { backend: "builtin-flags".into(), operation: "writes" }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ClientError> {
/// let dark = Flag { name: "dark-mode".into(), on: true, version: Revision::new(1) };
/// let flags = Client::new(Builtin(BTreeMap::from([(dark.name.clone(), dark)])));
/// assert!(flags.get(&"dark-mode".to_owned()).await?.is_some_and(|flag| flag.on));
/// assert!(matches!(flags.delete(&"dark-mode".to_owned()).await, Err(ClientError::Unsupported { .. })));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The type of the objects this backend stores.
    type Object: Object;

    /// A short name for errors and logs (the source's name).
    fn name(&self) -> &str;

    /// Whether this backend has a fencing authority: whether a write with
    /// a fencing token can succeed (without one, such a write is
    /// [`ClientError::NoFencing`]). Default: `false`.
    fn fences(&self) -> bool {
        false
    }

    /// The backend's newest revision now, or `None` when it cannot tell
    /// (the default). A controller with read-your-writes asks after a write
    /// whose outcome is unknown ([`ClientError::Unavailable`]: say, a
    /// create whose answer was lost with the server), and its key's next
    /// reconcile waits until the cache has reached that revision, so that
    /// it sees the write if it landed. Answer with one cheap request; it is
    /// asked again while it fails.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unavailable`] when the backend cannot be read now.
    async fn head(&self) -> Result<Option<Revision>, ClientError> {
        Ok(None)
    }

    /// The object stored under `key` now.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unavailable`]; [`ClientError::Invalid`] when the key
    /// has no form in the backend or the stored value cannot be decoded.
    async fn get(&self, key: &KeyOf<Self>) -> Result<Option<Self::Object>, ClientError>;

    /// Every object stored now, at one revision.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unavailable`].
    async fn list(&self) -> Result<Snapshot<Self::Object>, ClientError>;

    /// Stores a new object; returns it with its version set.
    ///
    /// # Errors
    ///
    /// [`ClientError::AlreadyExists`], [`ClientError::Fenced`],
    /// [`ClientError::NoFencing`], [`ClientError::Invalid`],
    /// [`ClientError::Unavailable`].
    async fn create(
        &self,
        object: Self::Object,
        token: Option<FencingToken>,
    ) -> Result<Self::Object, ClientError>;

    /// Replaces a stored object provided its version is the stored one;
    /// returns it with its new version set.
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`], [`ClientError::Conflict`],
    /// [`ClientError::Fenced`], [`ClientError::NoFencing`],
    /// [`ClientError::Invalid`], [`ClientError::Unavailable`].
    async fn update(
        &self,
        object: Self::Object,
        token: Option<FencingToken>,
    ) -> Result<Self::Object, ClientError>;

    /// Deletes the object stored under `key` (only at `version`, when
    /// given); returns the revision of the delete.
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`], [`ClientError::Conflict`],
    /// [`ClientError::Fenced`], [`ClientError::NoFencing`],
    /// [`ClientError::Invalid`], [`ClientError::Unavailable`].
    async fn delete(
        &self,
        key: &KeyOf<Self>,
        version: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError>;

    /// Writes the status part of `object` only, as [`update`](Backend::update)
    /// otherwise (Kubernetes' `status` subresource). The default, for
    /// backends that store an object whole, is [`update`](Backend::update).
    ///
    /// # Errors
    ///
    /// As [`update`](Backend::update).
    async fn update_status(
        &self,
        object: Self::Object,
        token: Option<FencingToken>,
    ) -> Result<Self::Object, ClientError> {
        self.update(object, token).await
    }

    /// Server-side apply of `object` by the field manager `manager`,
    /// taking over fields other managers own. The default refuses it:
    /// only Kubernetes merges by field ownership.
    ///
    /// # Errors
    ///
    /// [`ClientError::Unsupported`] by default; as
    /// [`update`](Backend::update) where supported.
    async fn apply(
        &self,
        object: Self::Object,
        manager: &str,
        token: Option<FencingToken>,
    ) -> Result<Self::Object, ClientError> {
        let _ = (object, manager, token);
        Err(ClientError::Unsupported {
            backend: self.name().to_owned(),
            operation: "server-side apply",
        })
    }
}
