//! Custom-resource conversion: the [`Convert`] trait and the endpoint that
//! decodes a `ConversionReview`, converts each object and encodes the
//! result.

use std::future::Future;

use async_trait::async_trait;
use hyper::body::Bytes;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::{Status, TypeMeta};
use serde_json::Value;

use super::route::{Answer, Endpoint};
use crate::BoxError;
use crate::error::error_chain;

/// A conversion handler: one object of a custom resource, as JSON, to the
/// same object at another version of its kind.
///
/// Implemented by every `Fn(Value, String) -> impl Future<Output =
/// Result<Value, E>>` (the object, the `apiVersion` wanted) whose error
/// converts into a [`BoxError`] (a `String`, `&str` or any error);
/// implement it on a type of your own to hold state.
///
/// The converted object must carry the wanted `apiVersion` and keep the
/// object's `metadata` but for labels and annotations (the API server
/// checks both). An object already at the wanted version is passed through
/// without calling the handler. An error fails the whole review with its
/// message (a `Failure` status): the API server then fails the request
/// that needed the conversion with that message.
///
/// # Examples
///
/// ```
/// use serde_json::{Value, json};
/// use tend::webhook::Webhook;
///
/// // v1 has `spec.size`; v2 calls it `spec.replicas`.
/// async fn convert(mut object: Value, desired: String) -> Result<Value, String> {
///     let spec = object["spec"].as_object_mut().ok_or("no spec")?;
///     match desired.as_str() {
///         "example.com/v2" => { let size = spec.remove("size").unwrap_or(json!(1)); spec.insert("replicas".into(), size); }
///         "example.com/v1" => { let replicas = spec.remove("replicas").unwrap_or(json!(1)); spec.insert("size".into(), replicas); }
///         other => return Err(format!("unknown version {other}")),
///     }
///     object["apiVersion"] = Value::String(desired);
///     Ok(object)
/// }
///
/// let webhook = Webhook::conversion(convert);
/// # drop(webhook);
/// ```
#[async_trait]
pub trait Convert: Send + Sync + 'static {
    /// `object` converted to `desired_api_version`. A panic is caught and
    /// answered `500` (see the [module docs](super)).
    ///
    /// # Errors
    ///
    /// Why the object cannot be converted.
    async fn convert(&self, object: Value, desired_api_version: &str) -> Result<Value, BoxError>;
}

#[async_trait]
impl<F, Fut, E> Convert for F
where
    F: Fn(Value, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, E>> + Send,
    E: Into<BoxError>,
{
    async fn convert(&self, object: Value, desired_api_version: &str) -> Result<Value, BoxError> {
        self(object, desired_api_version.to_owned())
            .await
            .map_err(Into::into)
    }
}

/// A [`Convert`] behind a path.
pub(super) struct Converting<C> {
    handler: C,
}

impl<C> Converting<C> {
    pub(super) fn new(handler: C) -> Self {
        Self { handler }
    }
}

#[async_trait]
impl<C: Convert> Endpoint for Converting<C> {
    async fn answer(&self, body: Bytes) -> Answer {
        let mut request = match decode(&body) {
            Ok(request) => request,
            Err(message) => return Answer::BadInput(message),
        };
        let objects = std::mem::take(&mut request.objects);
        let desired = request.desired_api_version.clone();
        let response = ConversionResponse::for_request(request);
        let mut converted = Vec::with_capacity(objects.len());
        for object in objects {
            match self.convert_one(object, &desired).await {
                Ok(object) => converted.push(object),
                Err(message) => {
                    let failed = response.failure(Status::failure(&message, "ConversionFailed"));
                    return encode(failed);
                }
            }
        }
        encode(response.success(converted))
    }
}

impl<C: Convert> Converting<C> {
    async fn convert_one(&self, object: Value, desired: &str) -> Result<Value, String> {
        if api_version(&object) == Some(desired) {
            return Ok(object);
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("an object without a name")
            .to_owned();
        let converted = self
            .handler
            .convert(object, desired)
            .await
            .map_err(|error| format!("converting {name} to {desired}: {}", error_chain(&*error)))?;
        match api_version(&converted) {
            Some(version) if version == desired => Ok(converted),
            version => Err(format!(
                "converting {name} to {desired}: the converter returned apiVersion {}",
                version.unwrap_or("(none)")
            )),
        }
    }
}

fn api_version(object: &Value) -> Option<&str> {
    object["apiVersion"].as_str()
}

/// The request of a `ConversionReview`, or why the body is not one (the
/// message of a `400`).
pub(super) fn decode(body: &[u8]) -> Result<ConversionRequest, String> {
    let wrong_kind = |kind: &str| format!("expected a ConversionReview, got kind {kind:?}");
    let review: ConversionReview = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(error) => {
            return Err(match serde_json::from_slice::<TypeMeta>(body) {
                Ok(types) if types.kind != "ConversionReview" => wrong_kind(&types.kind),
                _ => format!("malformed ConversionReview: {error}"),
            });
        }
    };
    if review.types.kind != "ConversionReview" {
        return Err(wrong_kind(&review.types.kind));
    }
    let request = ConversionRequest::try_from(review)
        .map_err(|_| "the ConversionReview has no request".to_owned())?;
    if request.desired_api_version.is_empty() {
        return Err("the ConversionReview's request has no desiredAPIVersion".to_owned());
    }
    Ok(request)
}

fn encode(response: ConversionResponse) -> Answer {
    match serde_json::to_vec(&response.into_review()) {
        Ok(json) => Answer::Review(json),
        Err(error) => Answer::Failed(format!("encoding the ConversionReview failed: {error}")),
    }
}
