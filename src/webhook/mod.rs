//! Admission and conversion webhooks (feature `webhook`): an HTTPS server
//! that the Kubernetes API server calls to validate or mutate objects
//! before they are stored, and to convert custom resources between the
//! versions of their kind.
//!
//! - [`WebhookServer`]: bound to an address, serving the certificate of
//!   two PEM files ([`CertificateFiles`], as cert-manager's Secret mounts
//!   them) and reading them again as they rotate, without a restart; webhooks routed by path.
//! - [`Webhook::validating`]: a handler from an [`AdmissionRequest<K>`]
//!   (kube-rs's: the typed object, the old object, the operation, the user)
//!   to a [`Verdict`] (allow, or deny with a message; warnings).
//! - [`Webhook::mutating`]: a handler to a [`Mutation<K>`]: the object as
//!   it should be (tend computes the JSON patch), a patch, or a denial.
//! - [`Webhook::conversion`]: a handler from an object (JSON) and the
//!   `apiVersion` wanted to the converted object.
//!
//! Handlers are async functions or closures, or types of your own that
//! implement [`Validate`], [`Mutate`] or [`Convert`].
//!
//! # Examples
//!
//! A validating and a mutating webhook for ConfigMaps, run by the manager
//! on every replica: the API server calls whichever replica its Service
//! picks, so a webhook must never be leader-only
//! ([`Manager::add_task`](crate::manager::Manager::add_task) runs on
//! every replica, as
//! [`Placement::Everywhere`](crate::placement::Placement::Everywhere)).
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use tend::manager::Manager;
//! use tend::webhook::{AdmissionRequest, CertificateFiles, Mutation, Verdict, Webhook, WebhookServer};
//!
//! async fn validate(request: AdmissionRequest<ConfigMap>) -> Verdict {
//!     let keys = request.object.and_then(|map| map.data).map_or(0, |data| data.len());
//!     if keys > 100 { Verdict::deny("at most 100 keys") } else { Verdict::allow() }
//! }
//!
//! async fn label(request: AdmissionRequest<ConfigMap>) -> Mutation<ConfigMap> {
//!     let Some(mut map) = request.object else { return Mutation::unchanged() };
//!     map.metadata.labels.get_or_insert_default().insert("team".into(), "shop".into());
//!     Mutation::object(map)
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut manager = Manager::builder().build()?;
//! let server = WebhookServer::builder("0.0.0.0:9443".parse()?, CertificateFiles::in_dir("/tls"))
//!     .route("/validate-configmaps", Webhook::validating(validate))
//!     .route("/mutate-configmaps", Webhook::mutating(label))
//!     .metrics(manager.registry_mut())
//!     .build()?;
//! manager.add_task("webhooks", |stop| async move { Ok(server.run(stop).await?) })?;
//! manager.run().await?;
//! # Ok(()) }
//! ```
//!
//! # What each request is answered
//!
//! | request | answer |
//! |---|---|
//! | a review the handler answered | `200` and the review with its response |
//! | a path no webhook is routed on | `404` |
//! | not a `POST` | `405` |
//! | a content type other than `application/json`; malformed JSON; not an `AdmissionReview` (or `ConversionReview`); no `request`; an object that is not the webhook's type | `400` and why |
//! | a body above [`max_body_bytes`](WebhookServerBuilder::max_body_bytes) (declared or read) | `400` |
//! | a body that did not arrive within the webhook's timeout | `408` |
//! | no free slot of [`max_concurrent_requests`](WebhookServerBuilder::max_concurrent_requests) within the webhook's timeout | `429` |
//! | a handler that panicked | `500` (counted in `controller_runtime_webhook_panics_total`) |
//! | a handler past the webhook's [`timeout`](Webhook::timeout) | `504` (the handler's future is dropped; counted in `tend_webhook_timeouts_total`) |
//!
//! # Failure policy
//!
//! The API server applies a webhook configuration's `failurePolicy` when
//! the call fails: no connection, a TLS error, its `timeoutSeconds`
//! passed, or an answer other than `200` with a review. `Fail` (the
//! default) refuses the request with an internal error, `Ignore` admits
//! it. A denial is not a failure: it refuses the request under either
//! policy. So a handler that panics or runs past its timeout is answered
//! with an HTTP error (`500`, `504`), never a denial: the webhook's policy
//! decides, as its author configured it, and the same happens when the
//! server is down. Bad input gets a `400` for the same reason. The API
//! server retries a call that failed with a `5xx` or `429` a few times
//! within its `timeoutSeconds`: each attempt is answered and counted.
//!
//! Set each webhook's [`timeout`](Webhook::timeout) below its
//! configuration's `timeoutSeconds` (10 s unless set, at most 30 s), so
//! that the server answers first.
//!
//! # Certificates
//!
//! The server needs a certificate that the API server trusts (the
//! configuration's `caBundle`) for the name it calls (the Service's DNS
//! name, or the `url`'s host). A check every
//! [`certificate_check_interval`](WebhookServerBuilder::certificate_check_interval)
//! reads both files again; when their bytes changed, the new pair serves
//! from the next TLS handshake on (connections already open keep theirs).
//! A new pair that cannot be loaded is logged and counted, and the old one
//! keeps serving. The files' bytes, not notifications or modification
//! times, are compared, so that cert-manager's atomic swap of a mounted
//! Secret is seen however it is done. TLS is rustls with the *ring*
//! provider (the one kube-rs's `rustls-tls` uses here), TLS 1.2 and 1.3,
//! HTTP/1.1.
//!
//! # Metrics
//!
//! With [`WebhookServerBuilder::metrics`], labelled by the webhook's path
//! (a request to a path no webhook is routed on is answered `404` and not
//! counted, so that scanners cannot grow the label set):
//! `controller_runtime_webhook_requests_total{webhook, code}`,
//! `controller_runtime_webhook_latency_seconds{webhook}`,
//! `controller_runtime_webhook_requests_in_flight{webhook}` and
//! `controller_runtime_webhook_panics_total{webhook}` (controller-runtime's
//! names), `tend_webhook_timeouts_total{webhook}`,
//! `tend_webhook_rejected_requests_total{webhook, reason}` (`malformed`,
//! `too_large`, `method`, `busy`, `slow_body`) and
//! `tend_webhook_certificate_reloads_total{result}` (`ok`, `failed`).

mod admission;
mod conversion;
mod error;
mod metrics;
mod request;
mod route;
mod server;
mod tls;
mod verdict;

pub use self::admission::{AdmissionObject, Mutate, Validate};
pub use self::conversion::Convert;
pub use self::error::{WebhookError, WebhookSetting};
pub use self::route::{DEFAULT_TIMEOUT, Webhook, WebhookKind};
pub use self::server::{
    DEFAULT_CERTIFICATE_CHECK_INTERVAL, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT_REQUESTS,
    WebhookServer, WebhookServerBuilder,
};
pub use self::tls::CertificateFiles;
pub use self::verdict::{Mutation, Verdict};
/// kube-rs's admission request (the typed object, old object, operation,
/// user info, dry run), re-exported: what admission handlers get.
pub use kube::core::admission::{AdmissionRequest, Operation};

#[cfg(test)]
mod tests;
