//! The finalizer pattern as a helper: keep a finalizer on every live
//! object, and on deletion run a cleanup, then remove it.

use std::future::Future;
use std::sync::Arc;

use super::{Action, Context};
use crate::client::{Client, ClientError};
use crate::object::Object;

/// What [`finalizer`] asks its handler to do.
#[derive(Debug, Clone)]
pub enum Finalize<O> {
    /// The object is live and carries the finalizer: reconcile it as usual.
    Apply(Arc<O>),
    /// The object is being deleted and still carries the finalizer (read
    /// live, not from the cache): clean up what it stands for. Returning
    /// [`Action::Done`] removes the finalizer, and the backend then
    /// removes the object; a requeue keeps it (the cleanup goes on) and
    /// the key comes back as the action says; an error keeps it and is
    /// retried.
    Cleanup(Arc<O>),
}

/// [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FinalizerError<E: std::error::Error + 'static> {
    /// The handler's [`Finalize::Apply`] failed.
    #[error("reconciling the live object failed")]
    Apply(#[source] E),
    /// The handler's [`Finalize::Cleanup`] failed: the finalizer is kept.
    #[error("the cleanup for finalizer {finalizer} failed")]
    Cleanup {
        /// The finalizer.
        finalizer: String,
        /// The handler's error.
        #[source]
        source: E,
    },
    /// Adding, reading or removing the finalizer failed.
    #[error("writing finalizer {finalizer} failed")]
    Client {
        /// The finalizer.
        finalizer: String,
        /// The client's error.
        #[source]
        source: ClientError,
    },
    /// The controller has no client for the object's type: give it one
    /// with [`ControllerBuilder::client`](super::ControllerBuilder::client).
    #[error("the controller has no client for its objects (see ControllerBuilder::client)")]
    NoClient,
    /// The finalizer's name is empty.
    #[error("a finalizer's name cannot be empty")]
    EmptyName,
}

impl<E: std::error::Error + 'static> FinalizerError<E> {
    /// How long the backend asked to wait, when the finalizer's own write
    /// or read was throttled ([`ClientError::retry_after`]); give it to
    /// [`ErrorPolicy::RetryAfter`](super::ErrorPolicy::RetryAfter).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tend::client::ClientError;
    /// use tend::controller::FinalizerError;
    ///
    /// let throttled = ClientError::RetryLater {
    ///     backend: "volumes".into(),
    ///     retry_after: Duration::from_secs(3),
    ///     source: "429 Too Many Requests".into(),
    /// };
    /// let error = FinalizerError::<std::io::Error>::Client { finalizer: "example.com/detach".into(), source: throttled };
    /// assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
    /// assert_eq!(FinalizerError::<std::io::Error>::NoClient.retry_after(), None);
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Client { source, .. } => source.retry_after(),
            _ => None,
        }
    }

    /// The handler's own error, if the handler failed: what an
    /// [`error_policy`](super::Reconciler::error_policy) looks at.
    ///
    /// ```
    /// use tend::controller::{ErrorPolicy, FinalizerError};
    /// # #[derive(Debug, thiserror::Error)] #[error("invalid spec")] struct InvalidSpec;
    ///
    /// fn error_policy(error: &FinalizerError<InvalidSpec>) -> ErrorPolicy {
    ///     match error.handler_error() {
    ///         Some(InvalidSpec) => ErrorPolicy::Terminal, // until the spec changes
    ///         None => ErrorPolicy::Retry,                  // the client's: retry
    ///     }
    /// }
    /// assert_eq!(error_policy(&FinalizerError::Apply(InvalidSpec)), ErrorPolicy::Terminal);
    /// assert_eq!(error_policy(&FinalizerError::NoClient), ErrorPolicy::Retry);
    /// ```
    #[must_use]
    pub fn handler_error(&self) -> Option<&E> {
        match self {
            Self::Apply(error) | Self::Cleanup { source: error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Runs `handle` for the reconcile `ctx` under the finalizer `name`, the
/// pattern every operator writes by hand (kube-runtime's `finalizer`,
/// controller-runtime's finalizer package), on every backend:
///
/// - a live object without `name` gets it first (written through the
///   context's client, so fenced and read back), then `handle` applies it
///   in the same reconcile, so a predicate that drops the finalizer's own
///   write (a generation predicate: metadata does not move it) cannot leave
///   the object unapplied; that write may still wake the key once more;
/// - an object being deleted that still carries `name` is read live, and
///   `handle` cleans up; [`Action::Done`] from the cleanup removes `name`;
/// - an object being deleted without `name` (cleaned up already, or never
///   ours) and a key with no object are done: nothing to run.
///
/// The cleanup runs until it succeeds once: a failure or a restart in the
/// middle keeps the finalizer, so it runs again; after a success the
/// finalizer is gone, read live, so neither a stale cache nor a restart
/// runs it again. (A crash between the cleanup's success and the
/// finalizer's removal, or a removal that fails — a conflict, the backend
/// unavailable, a stale fencing token — runs it again: make it
/// idempotent.)
///
/// # Errors
///
/// [`FinalizerError`]: the handler's error, the client's, or a controller
/// without a client for `O`.
///
/// # Examples
///
/// ```
/// use tend::controller::{Action, Context, Finalize, FinalizerError, Reconciler, finalizer};
/// # #[derive(Clone, Debug, PartialEq)]
/// # struct Volume { name: String, lifecycle: tend::Lifecycle, version: tend::Revision }
/// # tend::impl_object!(Volume, key: name: String, version: version, lifecycle: lifecycle);
/// # #[derive(Debug, thiserror::Error)] #[error("detach failed")] struct DetachError;
///
/// struct Volumes;
///
/// impl Reconciler<Volume> for Volumes {
///     type Error = FinalizerError<DetachError>;
///
///     async fn reconcile(&self, ctx: Context<Volume>) -> Result<Action, Self::Error> {
///         finalizer(&ctx, "example.com/detach", |step| async move {
///             match step {
///                 Finalize::Apply(volume) => Ok(Action::Done), // attach it
///                 Finalize::Cleanup(volume) => Ok(Action::Done), // detach it
///             }
///         })
///         .await
///     }
/// }
/// ```
pub async fn finalizer<O, E, F, Fut>(
    ctx: &Context<O>,
    name: &str,
    handle: F,
) -> Result<Action, FinalizerError<E>>
where
    O: Object,
    E: std::error::Error + 'static,
    F: FnOnce(Finalize<O>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    if name.is_empty() {
        return Err(FinalizerError::EmptyName);
    }
    let Some(object) = ctx.object() else {
        return Ok(Action::Done);
    };
    let client = ctx.client::<O>().ok_or(FinalizerError::NoClient)?;
    let finalized = Finalized {
        client,
        name,
        key: ctx.key(),
    };
    if object.deletion().is_none() {
        let Some(object) = finalized.guarded(object).await? else {
            return Ok(Action::Done);
        };
        return handle(Finalize::Apply(object))
            .await
            .map_err(FinalizerError::Apply);
    }
    if !has(&**object, name) {
        return Ok(Action::Done);
    }
    let Some(live) = finalized.still_held().await? else {
        return Ok(Action::Done);
    };
    let action =
        handle(Finalize::Cleanup(live))
            .await
            .map_err(|source| FinalizerError::Cleanup {
                finalizer: name.to_owned(),
                source,
            })?;
    if action != Action::Done {
        return Ok(action);
    }
    finalized.release().await?;
    Ok(Action::Done)
}

/// The finalizer `name` on the object under `key`, written with `client`.
struct Finalized<'a, O: Object> {
    client: Client<O>,
    name: &'a str,
    key: &'a O::Key,
}

impl<O: Object> Finalized<'_, O> {
    /// `object` with the finalizer, added if missing; `None` when the
    /// object went or began its deletion without it meanwhile.
    async fn guarded<E: std::error::Error + 'static>(
        &self,
        object: &Arc<O>,
    ) -> Result<Option<Arc<O>>, FinalizerError<E>> {
        if has(&**object, self.name) {
            return Ok(Some(Arc::clone(object)));
        }
        match self.client.add_finalizer(self.key, self.name).await {
            Ok(written) => Ok(Some(Arc::new(written.object))),
            Err(ClientError::BeingDeleted { .. }) => Ok(None),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(self.failed(error)),
        }
    }

    /// The object as stored now, if it still carries the finalizer and is
    /// being deleted (the cache may be behind a removal already done).
    async fn still_held<E: std::error::Error + 'static>(
        &self,
    ) -> Result<Option<Arc<O>>, FinalizerError<E>> {
        let live = self
            .client
            .get(self.key)
            .await
            .map_err(|e| self.failed(e))?;
        let held = live.filter(|live| live.deletion().is_some() && has(live, self.name));
        Ok(held.map(Arc::new))
    }

    async fn release<E: std::error::Error + 'static>(&self) -> Result<(), FinalizerError<E>> {
        let removed = self.client.remove_finalizer(self.key, self.name).await;
        removed.map(drop).map_err(|error| self.failed(error))
    }

    fn failed<E: std::error::Error + 'static>(&self, source: ClientError) -> FinalizerError<E> {
        FinalizerError::Client {
            finalizer: self.name.to_owned(),
            source,
        }
    }
}

fn has<O: Object>(object: &O, name: &str) -> bool {
    object
        .finalizer_names()
        .is_some_and(|names| names.iter().any(|n| n == name))
}
