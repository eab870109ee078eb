//! One HTTP request to a webhook: routing, the checks of bad input, the
//! body limit, the bound on concurrent handlers, the timeout, a handler's
//! panic; and the answer's metrics.

use std::collections::HashMap;
use std::fmt::Display;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use super::metrics::Metrics;
use super::route::{Answer, Endpoint};
use crate::BoxError;

/// A webhook as the server routes to it.
pub(super) struct Route {
    pub(super) endpoint: Arc<dyn Endpoint>,
    pub(super) timeout: Duration,
}

/// What every request reads.
pub(super) struct Shared {
    pub(super) routes: HashMap<String, Route>,
    pub(super) max_body: usize,
    pub(super) permits: Semaphore,
    pub(super) metrics: Metrics,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut paths: Vec<&String> = self.routes.keys().collect();
        paths.sort();
        f.debug_struct("Shared")
            .field("routes", &paths)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

/// How a request ended.
#[derive(Debug)]
enum Outcome {
    /// The handler answered: `200` and the review.
    Answered(Vec<u8>),
    /// Refused before a handler ran (counted by `reason`).
    Refused {
        status: StatusCode,
        reason: &'static str,
        message: String,
    },
    /// The handler's answer could not be encoded.
    Failed(String),
    Panicked(String),
    TimedOut(Duration),
}

impl Outcome {
    fn refused(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self::Refused {
            status,
            reason,
            message: message.into(),
        }
    }
}

/// Answers `request`. Never fails: every failure is an HTTP status with a
/// message.
pub(super) async fn handle<B>(shared: &Shared, request: Request<B>) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let path = request.uri().path().to_owned();
    let Some(route) = shared.routes.get(&path) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("no webhook is served on {path}"),
        );
    };
    let started = Instant::now();
    let in_flight = shared.metrics.in_flight(&path);
    let outcome = serve(shared, route, request).await;
    drop(in_flight);
    let response = respond(&shared.metrics, &path, outcome);
    let seconds = started.elapsed().as_secs_f64();
    shared
        .metrics
        .answered(&path, response.status().as_u16(), seconds);
    response
}

/// Reads, checks, and hands the body to the route's endpoint, within the
/// route's timeout.
async fn serve<B>(shared: &Shared, route: &Route, request: Request<B>) -> Outcome
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let deadline = crate::time::deadline(Instant::now(), route.timeout);
    if let Err(refused) = check_head(&request, shared.max_body) {
        return refused;
    }
    let limited = Limited::new(request.into_body(), shared.max_body);
    let body = match timeout_at(deadline, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large(shared.max_body);
        }
        Ok(Err(error)) => {
            let message = format!("reading the request body failed: {error}");
            return Outcome::refused(StatusCode::BAD_REQUEST, "malformed", message);
        }
        Err(_) => {
            let message = "the request body did not arrive within the webhook's timeout";
            return Outcome::refused(StatusCode::REQUEST_TIMEOUT, "slow_body", message);
        }
    };
    let Ok(Ok(_permit)) = timeout_at(deadline, shared.permits.acquire()).await else {
        let message =
            "too many concurrent webhook requests: none finished within the webhook's timeout";
        return Outcome::refused(StatusCode::TOO_MANY_REQUESTS, "busy", message);
    };
    let call = AssertUnwindSafe(route.endpoint.answer(body)).catch_unwind();
    match timeout_at(deadline, call).await {
        Ok(Ok(Answer::Review(json))) => Outcome::Answered(json),
        Ok(Ok(Answer::BadInput(message))) => {
            Outcome::refused(StatusCode::BAD_REQUEST, "malformed", message)
        }
        Ok(Ok(Answer::Failed(message))) => Outcome::Failed(message),
        Ok(Err(panic)) => Outcome::Panicked(panic_message(&*panic)),
        Err(_) => Outcome::TimedOut(route.timeout),
    }
}

/// The checks of the method, the content type and the declared length.
fn check_head<B>(request: &Request<B>, max_body: usize) -> Result<(), Outcome> {
    if request.method() != Method::POST {
        let message = format!("webhooks take POST, not {}", request.method());
        return Err(Outcome::refused(
            StatusCode::METHOD_NOT_ALLOWED,
            "method",
            message,
        ));
    }
    let content_type = request.headers().get(CONTENT_TYPE);
    if !content_type.is_some_and(is_json) {
        let message = format!(
            "the content type must be application/json, not {}",
            content_type.map_or("none".into(), |value| String::from_utf8_lossy(
                value.as_bytes()
            ))
        );
        return Err(Outcome::refused(
            StatusCode::BAD_REQUEST,
            "malformed",
            message,
        ));
    }
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(length) if length > max_body as u64 => Err(too_large(max_body)),
        _ => Ok(()),
    }
}

fn is_json(value: &HeaderValue) -> bool {
    let value = value.to_str().unwrap_or_default();
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

fn too_large(max_body: usize) -> Outcome {
    let message = format!("the request body is larger than the limit of {max_body} bytes");
    Outcome::refused(StatusCode::BAD_REQUEST, "too_large", message)
}

/// The response to `outcome`, counted and logged.
fn respond(metrics: &Metrics, webhook: &str, outcome: Outcome) -> Response<Full<Bytes>> {
    match outcome {
        Outcome::Answered(json) => {
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Outcome::Refused {
            status,
            reason,
            message,
        } => {
            tracing::debug!(webhook, %status, reason, message, "webhook request refused");
            metrics.rejected(webhook, reason);
            text(status, message)
        }
        Outcome::Failed(message) => {
            tracing::error!(webhook, message, "webhook answer could not be sent");
            text(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
        Outcome::Panicked(message) => {
            tracing::error!(webhook, panic = message, "webhook handler panicked");
            metrics.panicked(webhook);
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the webhook handler panicked: {message}"),
            )
        }
        Outcome::TimedOut(timeout) => {
            tracing::warn!(webhook, ?timeout, "webhook handler timed out");
            metrics.timed_out(webhook);
            text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("the webhook handler did not answer within {timeout:?}"),
            )
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

fn text(status: StatusCode, message: impl Display) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
