//! A [`Webhook`]: one handler behind one path, with its timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hyper::body::Bytes;

use super::admission::{AdmissionObject, Mutate, Mutating, Validate, Validating};
use super::conversion::{Convert, Converting};

/// How long a webhook's request may take unless
/// [`Webhook::timeout`] says otherwise: 9 s, a second under the API
/// server's default `timeoutSeconds` (10 s), so that the server's own
/// answer (a `504`, counted) arrives before the API server gives up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(9);

/// What an endpoint answers to a request's body.
#[derive(Debug)]
pub(super) enum Answer {
    /// A review with its response, as JSON: `200 OK`.
    Review(Vec<u8>),
    /// The body is not a review this endpoint takes: `400 Bad Request`.
    BadInput(String),
    /// The handler's answer cannot be sent: `500 Internal Server Error`.
    Failed(String),
}

/// A handler behind a path, its types erased.
#[async_trait]
pub(super) trait Endpoint: Send + Sync + 'static {
    /// Decodes `body`, runs the handler, encodes its answer.
    async fn answer(&self, body: Bytes) -> Answer;
}

/// What kind of review a webhook answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookKind {
    /// Validating admission.
    Validating,
    /// Mutating admission.
    Mutating,
    /// Custom-resource conversion.
    Conversion,
}

/// One webhook: a handler and its timeout, routed on a path with
/// [`WebhookServerBuilder::route`](super::WebhookServerBuilder::route).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::webhook::{AdmissionRequest, Verdict, Webhook, WebhookKind};
///
/// let webhook = Webhook::validating(|request: AdmissionRequest<ConfigMap>| async move {
///     match request.object.and_then(|map| map.data).is_some_and(|data| data.len() > 100) {
///         true => Verdict::deny("at most 100 keys"),
///         false => Verdict::allow(),
///     }
/// })
/// .timeout(Duration::from_secs(2));
/// assert_eq!(webhook.kind(), WebhookKind::Validating);
/// ```
#[derive(Clone)]
pub struct Webhook {
    pub(super) endpoint: Arc<dyn Endpoint>,
    kind: WebhookKind,
    pub(super) timeout: Duration,
}

impl Webhook {
    /// A validating webhook over objects of type `K`: `handler` is an async
    /// function from an [`AdmissionRequest<K>`](super::AdmissionRequest)
    /// to a [`Verdict`](super::Verdict), or a type implementing
    /// [`Validate`].
    pub fn validating<K: AdmissionObject>(handler: impl Validate<K>) -> Self {
        Self::new(WebhookKind::Validating, Arc::new(Validating::new(handler)))
    }

    /// A mutating webhook over objects of type `K`: `handler` is an async
    /// function from an [`AdmissionRequest<K>`](super::AdmissionRequest)
    /// to a [`Mutation<K>`](super::Mutation), or a type implementing
    /// [`Mutate`].
    pub fn mutating<K: AdmissionObject>(handler: impl Mutate<K>) -> Self {
        Self::new(WebhookKind::Mutating, Arc::new(Mutating::new(handler)))
    }

    /// A conversion webhook: `handler` is an async function from an
    /// object (JSON) and the `apiVersion` wanted to the converted object,
    /// or a type implementing [`Convert`].
    pub fn conversion(handler: impl Convert) -> Self {
        Self::new(WebhookKind::Conversion, Arc::new(Converting::new(handler)))
    }

    fn new(kind: WebhookKind, endpoint: Arc<dyn Endpoint>) -> Self {
        Self {
            endpoint,
            kind,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Bounds each request, from its arrival to the answer (reading the
    /// body, waiting for a free slot, the handler): past it the handler is
    /// dropped and the request answered `504` (see the [module
    /// docs](super)). Keep it below the `timeoutSeconds` of the webhook's
    /// configuration, so that the server answers before the API server
    /// gives up. [`DEFAULT_TIMEOUT`] unless set; `Duration::MAX` (or any
    /// duration past a century) means no bound; zero is refused by
    /// [`build`](super::WebhookServerBuilder::build).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What kind of review it answers.
    #[must_use]
    pub fn kind(&self) -> WebhookKind {
        self.kind
    }
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("kind", &self.kind)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
