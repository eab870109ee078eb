//! The one error type of every backend's client.

use std::time::Duration;

use crate::error::BoxError;

use crate::client::FencingToken;
use crate::object::Revision;

/// Why a [`Client`](super::Client) call failed.
///
/// Every backend reports the same cases the same way, so code written and
/// tested against the memory backend handles etcd's answers unchanged. A
/// refused write (every variant but [`Unavailable`](Self::Unavailable))
/// wrote nothing; after `Unavailable` the write may or may not have landed.
/// Beside the errors each method lists, any call may end in
/// [`RetryLater`](Self::RetryLater) (an overloaded or throttling backend)
/// or [`Forbidden`](Self::Forbidden) (on Kubernetes, a `403`).
///
/// Keys are shown in their `Debug` form.
///
/// # Examples
///
/// ```
/// use tend::client::ClientError;
/// use tend::memory::MemoryStore;
/// use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)] struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// /// What a writer does next.
/// fn next_step(error: &ClientError) -> &'static str {
///     if error.is_conflict() { "read again, then write" }
///     else if error.is_fenced() { "stop: no longer the leader" }
///     else if error.is_retryable() { "retry later" }
///     else { "give up" }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ClientError> {
/// let lights = MemoryStore::new("lights").client();
/// let hall = lights.create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
/// lights.update(Light { on: true, ..hall.clone() }).await?;
/// let stale = lights.update(hall).await.unwrap_err(); // read before the last write
/// assert_eq!(next_step(&stale), "read again, then write");
/// let missing = lights.delete(&"attic".to_owned()).await.unwrap_err();
/// assert!(matches!(&missing, ClientError::NotFound { key } if key == "\"attic\"")); // `Debug` form
/// assert_eq!(next_step(&missing), "give up");
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// An update or delete named a key that is not stored.
    #[error("object {key} not found")]
    NotFound {
        /// The key, formatted with `Debug`.
        key: String,
    },
    /// A create named a key that is already stored.
    #[error("object {key} already exists")]
    AlreadyExists {
        /// The key, formatted with `Debug`.
        key: String,
    },
    /// An update or delete named a version that is not the stored one: the
    /// writer read a stale object and must read it again.
    #[error(
        "version conflict on object {key}: expected version {expected}, stored version is {actual}"
    )]
    Conflict {
        /// The key, formatted with `Debug`.
        key: String,
        /// The version the writer named.
        expected: Revision,
        /// The version stored ([`Revision::ZERO`] when the object is gone;
        /// on Kubernetes also when reading it again after the `409` failed:
        /// the server does not say which version it has).
        actual: Revision,
    },
    /// An update added a finalizer to an object being deleted (its
    /// [`deletion`](crate::Object::deletion) is set): refused, as in
    /// Kubernetes.
    #[error("object {key} is being deleted: no finalizer can be added")]
    BeingDeleted {
        /// The key, formatted with `Debug`.
        key: String,
    },
    /// The write carried a fencing token that is no longer current: the
    /// writer is not the leader (or owner) any more.
    #[error("fencing token {token} is no longer current")]
    Fenced {
        /// The stale token.
        token: FencingToken,
    },
    /// The write carried a fencing token, but the client was made without a
    /// fencing authority to check it against (see
    /// [`Client::fenced`](super::Client::fenced)).
    #[error("a fencing token was given to a client without a fencing authority")]
    NoFencing,
    /// The object cannot be stored: its key has no form in the backend, it
    /// cannot be encoded, or it is too large; or a stored value cannot be
    /// decoded.
    #[error("object {key} is invalid for this backend")]
    Invalid {
        /// The key, formatted with `Debug`.
        key: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The backend could not be reached or failed; retrying later may
    /// succeed. A write may or may not have landed.
    #[error("backend `{backend}` unavailable")]
    Unavailable {
        /// The backend's name (its source's name).
        backend: String,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
    /// The backend is overloaded or throttling this client and refused the
    /// call before acting on it (Kubernetes: a `429 Too Many Requests`,
    /// or a `503` whose status gives `retryAfterSeconds`): a write was not
    /// applied. `retry_after` is the status's `retryAfterSeconds`, or 1 s
    /// for a `429` that does not say (kube-rs does not expose the
    /// `Retry-After` header itself).
    /// Give [`retry_after`](Self::retry_after) to
    /// [`ErrorPolicy::RetryAfter`](crate::controller::ErrorPolicy::RetryAfter).
    #[error("backend `{backend}` asks to retry after {retry_after:?}")]
    RetryLater {
        /// The backend's name (its source's name).
        backend: String,
        /// How long the backend asked to wait.
        retry_after: Duration,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
    /// The server refused the write and will refuse it again unchanged: on
    /// Kubernetes a `403 Forbidden`, from an admission webhook or policy
    /// that denied it (the source's message is the webhook's) or from RBAC.
    #[error("the server refused the call on object {key}")]
    Forbidden {
        /// The key, formatted with `Debug`.
        key: String,
        /// What the server said (on Kubernetes, a `kube::Error::Api`
        /// with its status).
        #[source]
        source: BoxError,
    },
    /// The backend cannot do this at all (server-side apply anywhere but
    /// on Kubernetes).
    #[error("backend `{backend}` does not support {operation}")]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// What was asked.
        operation: &'static str,
    },
    /// [`Client::modify`](super::Client::modify) or
    /// [`Client::create_or_update`](super::Client::create_or_update) met a
    /// conflict on every attempt.
    #[error("object {key} still conflicted after {attempts} attempts")]
    TooManyConflicts {
        /// The key, formatted with `Debug`.
        key: String,
        /// The attempts made.
        attempts: u32,
    },
}

impl ClientError {
    /// Whether the object was not stored ([`NotFound`](Self::NotFound)).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether a create found the key taken
    /// ([`AlreadyExists`](Self::AlreadyExists)).
    #[must_use]
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Self::AlreadyExists { .. })
    }

    /// Whether the write named a stale version
    /// ([`Conflict`](Self::Conflict)): read again, then write.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether the writer's fencing token is stale
    /// ([`Fenced`](Self::Fenced)): it must stop acting.
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }

    /// Whether the server refused the write
    /// ([`Forbidden`](Self::Forbidden)): a webhook or policy denied it, or
    /// the caller may not make it.
    #[must_use]
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }

    /// Whether the same call may succeed if made again later unchanged
    /// ([`Unavailable`](Self::Unavailable),
    /// [`RetryLater`](Self::RetryLater)). A conflict is not: it needs a
    /// fresh read first (see [`Client::modify`](super::Client::modify)).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::RetryLater { .. })
    }

    /// How long the backend asked to wait before a retry
    /// ([`RetryLater`](Self::RetryLater)); `None` for every other error.
    ///
    /// # Examples
    ///
    /// A reconciler whose errors are the client's waits as long as the
    /// backend asks, and backs off as usual otherwise:
    ///
    /// ```
    /// use tend::client::ClientError;
    /// use tend::controller::ErrorPolicy;
    ///
    /// fn error_policy(error: &ClientError) -> ErrorPolicy {
    ///     error.retry_after().map_or(ErrorPolicy::Retry, ErrorPolicy::RetryAfter)
    /// }
    ///
    /// let missing = ClientError::not_found(&"web");
    /// assert_eq!(error_policy(&missing), ErrorPolicy::Retry);
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RetryLater { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// A [`NotFound`](Self::NotFound) for `key`.
    pub fn not_found(key: &impl std::fmt::Debug) -> Self {
        Self::NotFound {
            key: format!("{key:?}"),
        }
    }

    /// An [`AlreadyExists`](Self::AlreadyExists) for `key`.
    pub fn already_exists(key: &impl std::fmt::Debug) -> Self {
        Self::AlreadyExists {
            key: format!("{key:?}"),
        }
    }

    /// A [`Conflict`](Self::Conflict) on `key`.
    pub fn conflict(key: &impl std::fmt::Debug, expected: Revision, actual: Revision) -> Self {
        Self::Conflict {
            key: format!("{key:?}"),
            expected,
            actual,
        }
    }

    /// An [`Invalid`](Self::Invalid) for `key`, because of `source`.
    pub fn invalid(key: &impl std::fmt::Debug, source: impl Into<BoxError>) -> Self {
        Self::Invalid {
            key: format!("{key:?}"),
            source: source.into(),
        }
    }

    /// An [`Unavailable`](Self::Unavailable) of `backend`, because of
    /// `source`.
    pub fn unavailable(backend: &str, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            backend: backend.to_owned(),
            source: source.into(),
        }
    }
}
