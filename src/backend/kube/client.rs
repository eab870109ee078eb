//! The [`Backend`] of a [`Client`] for Kubernetes: reads and writes go to
//! the API server, which enforces versions (`resourceVersion`
//! preconditions) and finalizers itself.

use std::sync::Arc;

use async_trait::async_trait;
use either::Either;
use kube::api::{DeleteParams, PatchParams, Preconditions};

use super::endpoint::{Endpoint, KubeResource, is_missing, retry_after};
use super::object::{key_of, revision_of};
use crate::client::FencingToken;
use crate::client::{Backend, Client, ClientError, Fencing};
use crate::object::{Object, ObjectKey, Revision};
use crate::source::{Snapshot, Source, SourceError};

/// A client writing where `source` reads, its lists read as the source's.
pub(super) fn client<K: KubeResource>(
    source: super::KubeSource<K>,
    fencing: Option<Arc<dyn Fencing>>,
) -> Client<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    Client::new(KubeBackend { source, fencing })
}

/// One resource type on an API server, and the authority fenced writes are
/// checked against (locally: see the module docs of `tend::kube`).
struct KubeBackend<K: KubeResource> {
    source: super::KubeSource<K>,
    fencing: Option<Arc<dyn Fencing>>,
}

impl<K: KubeResource> KubeBackend<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    fn endpoint(&self) -> &Endpoint<K> {
        &self.source.endpoint
    }

    /// Refuses a write whose token is stale, just before it is sent.
    fn check(&self, token: Option<FencingToken>) -> Result<(), ClientError> {
        let Some(token) = token else {
            return Ok(());
        };
        let fencing = self.fencing.as_ref().ok_or(ClientError::NoFencing)?;
        if fencing.is_current(token) {
            Ok(())
        } else {
            Err(ClientError::Fenced { token })
        }
    }

    /// What a client of metadata-only objects cannot do: write what they
    /// lack (a create would make an object without its spec).
    fn metadata_only(&self, operation: &'static str) -> ClientError {
        ClientError::Unsupported {
            backend: self.name().to_owned(),
            operation,
        }
    }

    /// The object as the server returned it, its revision checked.
    fn written(&self, object: K) -> Result<K, ClientError> {
        revision_of(&object).map_err(|error| ClientError::invalid(&key_of(&object), error))?;
        Ok(object)
    }

    /// A `409 Conflict` as [`ClientError::Conflict`], with the version
    /// stored now (read again: the server does not say it). A failed read
    /// still reports the conflict, which is certain, with `actual` zero.
    async fn conflict(&self, key: &ObjectKey, expected: Revision) -> ClientError {
        let actual = match self.endpoint().get(&key.namespace, &key.name).await {
            Ok(stored) => stored.map_or(Revision::ZERO, |stored| stored.version()),
            Err(_) => Revision::ZERO,
        };
        ClientError::Conflict {
            key: format!("{key:?}"),
            expected,
            actual,
        }
    }

    /// An API error as the client's error for a write of `key`.
    async fn error(&self, error: kube::Error, key: &ObjectKey, expected: Revision) -> ClientError {
        let status = match &error {
            kube::Error::Api(status) => status,
            // Refused before it was sent: it can never succeed as it is.
            kube::Error::BuildRequest(_) | kube::Error::SerdeError(_) => {
                return ClientError::invalid(key, error);
            }
            _ => return ClientError::unavailable(self.name(), error),
        };
        if let Some(retry_after) = retry_after(status) {
            return ClientError::RetryLater {
                backend: self.name().to_owned(),
                retry_after,
                source: error.into(),
            };
        }
        match (status.code, status.reason.as_str()) {
            (404, _) if is_missing(&error, &key.name) => ClientError::not_found(key),
            // A route the server lacks (a kind not installed, a status
            // subresource the kind has not) or a missing namespace.
            (404, _) => ClientError::invalid(key, error),
            (409, "AlreadyExists") => ClientError::already_exists(key),
            (409, _) => self.conflict(key, expected).await,
            (422, _) if status.message.contains("no new finalizers") => ClientError::BeingDeleted {
                key: format!("{key:?}"),
            },
            (400 | 413 | 422, _) => ClientError::invalid(key, error),
            // An admission webhook's or policy's denial, or RBAC's.
            (403, _) => ClientError::Forbidden {
                key: format!("{key:?}"),
                source: error.into(),
            },
            _ => ClientError::unavailable(self.name(), error),
        }
    }

    /// A failed list as the client's error: a throttled one says when to
    /// retry, one the server refuses (`403`) is `Forbidden`, the rest
    /// `Unavailable`, as for the other calls.
    fn list_error(&self, error: SourceError) -> ClientError {
        let status = match &error {
            SourceError::Unavailable(source) => match source.downcast_ref::<kube::Error>() {
                Some(kube::Error::Api(status)) => Some(status),
                _ => None,
            },
            SourceError::Expired { .. } => None,
        };
        if let Some(retry_after) = status.and_then(|status| retry_after(status)) {
            return ClientError::RetryLater {
                backend: self.name().to_owned(),
                retry_after,
                source: error.into(),
            };
        }
        if status.is_some_and(|status| status.code == 403) {
            return ClientError::Forbidden {
                key: format!("(the list of {})", self.name()),
                source: error.into(),
            };
        }
        ClientError::unavailable(self.name(), error)
    }

    async fn replace(
        &self,
        object: K,
        token: Option<FencingToken>,
        status: bool,
    ) -> Result<K, ClientError> {
        let (key, expected) = (key_of(&object), object.version());
        if status && K::metadata_api() {
            return Err(self.metadata_only("writing the status of a metadata-only object"));
        }
        // No version would make Kubernetes write unconditionally.
        if expected == Revision::ZERO {
            return Err(self.conflict(&key, expected).await);
        }
        self.check(token)?;
        match self.endpoint().replace(&object, status).await {
            Ok(object) => self.written(object),
            Err(error) => Err(self.error(error, &key, expected).await),
        }
    }
}

#[async_trait]
impl<K: KubeResource> Backend for KubeBackend<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    type Object = K;

    fn fences(&self) -> bool {
        self.fencing.is_some()
    }

    fn name(&self) -> &str {
        Source::name(&self.source)
    }

    /// The source's [head](Source::head): a list of at most one object.
    async fn head(&self) -> Result<Option<Revision>, ClientError> {
        Source::head(&self.source)
            .await
            .map_err(|error| self.list_error(error))
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<K>, ClientError> {
        match self.endpoint().get(&key.namespace, &key.name).await {
            Ok(Some(object)) => self.written(object).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(self.error(error, key, Revision::ZERO).await),
        }
    }

    /// In pages, whatever the source's list mode: a point read, which needs
    /// only the `list` verb (a stream is a `watch`).
    async fn list(&self) -> Result<Snapshot<K>, ClientError> {
        self.source
            .list_paged(&|object| object)
            .await
            .map_err(|error| self.list_error(error))
    }

    async fn create(&self, mut object: K, token: Option<FencingToken>) -> Result<K, ClientError> {
        if K::metadata_api() {
            return Err(self.metadata_only("creating an object from its metadata only"));
        }
        let key = key_of(&object);
        // A create names no version; the server refuses one that does.
        object.set_version(Revision::ZERO);
        self.check(token)?;
        match self.endpoint().create(&key.namespace, &object).await {
            Ok(object) => self.written(object),
            Err(error) => Err(self.error(error, &key, Revision::ZERO).await),
        }
    }

    async fn update(&self, object: K, token: Option<FencingToken>) -> Result<K, ClientError> {
        self.replace(object, token, false).await
    }

    async fn update_status(
        &self,
        object: K,
        token: Option<FencingToken>,
    ) -> Result<K, ClientError> {
        self.replace(object, token, true).await
    }

    async fn apply(
        &self,
        mut object: K,
        manager: &str,
        token: Option<FencingToken>,
    ) -> Result<K, ClientError> {
        let key = key_of(&object);
        // Apply merges by field ownership, not by version.
        object.set_version(Revision::ZERO);
        object.meta_mut().managed_fields = None;
        self.check(token)?;
        let params = PatchParams::apply(manager).force();
        match self.endpoint().apply(&object, &params).await {
            Ok(object) => self.written(object),
            Err(error) => Err(self.error(error, &key, Revision::ZERO).await),
        }
    }

    async fn delete(
        &self,
        key: &ObjectKey,
        version: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        let mut params = DeleteParams::background();
        if let Some(version) = version {
            params = params.preconditions(Preconditions {
                resource_version: Some(version.get().to_string()),
                uid: None,
            });
        }
        self.check(token)?;
        let expected = version.unwrap_or(Revision::ZERO);
        match self
            .endpoint()
            .delete(&key.namespace, &key.name, &params)
            .await
        {
            // Marked (finalizers) or gone: the server returns the object
            // at its last revision; it does not say the delete's.
            Ok(Either::Left(object)) => Ok(object.version()),
            Ok(Either::Right(_)) => Ok(Revision::ZERO),
            Err(error) => Err(self.error(error, key, expected).await),
        }
    }
}
