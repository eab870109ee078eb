//! Validating and mutating admission: the handler traits and the
//! endpoints that decode an `AdmissionReview`, run a handler and encode
//! its answer.

use std::future::Future;
use std::marker::PhantomData;

use async_trait::async_trait;
use hyper::body::Bytes;
use kube::Resource;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::route::{Answer, Endpoint};
use super::verdict::{Change, Mutation, Verdict};

/// A type an admission webhook reviews: any kube-rs resource with a
/// static type (k8s-openapi's types, `#[derive(CustomResource)]` types),
/// or [`DynamicObject`] for any kind.
///
/// Implemented for every type that has the bounds; nothing to implement.
pub trait AdmissionObject:
    Resource<DynamicType: Default> + DeserializeOwned + Serialize + Clone + Send + Sync + 'static
{
}

impl<K> AdmissionObject for K
where
    K: Resource + DeserializeOwned + Serialize + Clone + Send + Sync + 'static,
    K::DynamicType: Default,
{
}

/// A validating admission handler over objects of type `K`.
///
/// Implemented by every `Fn(AdmissionRequest<K>) -> impl Future<Output =
/// Verdict>` (an async closure or function); implement it on a type of
/// your own to hold state (a client, a cache).
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::webhook::{AdmissionRequest, Validate, Verdict, Webhook};
///
/// struct MaxKeys(usize);
///
/// #[tend::async_trait]
/// impl Validate<ConfigMap> for MaxKeys {
///     async fn validate(&self, request: AdmissionRequest<ConfigMap>) -> Verdict {
///         let keys = request.object.and_then(|map| map.data).map_or(0, |data| data.len());
///         if keys > self.0 { Verdict::deny(format!("at most {} keys", self.0)) } else { Verdict::allow() }
///     }
/// }
///
/// let webhook = Webhook::validating(MaxKeys(100));
/// # drop(webhook);
/// ```
#[async_trait]
pub trait Validate<K: AdmissionObject>: Send + Sync + 'static {
    /// Admits or denies `request`. A panic is caught and answered `500`
    /// (see the [module docs](super)).
    async fn validate(&self, request: AdmissionRequest<K>) -> Verdict;
}

#[async_trait]
impl<K, F, Fut> Validate<K> for F
where
    K: AdmissionObject,
    F: Fn(AdmissionRequest<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Verdict> + Send,
{
    async fn validate(&self, request: AdmissionRequest<K>) -> Verdict {
        self(request).await
    }
}

/// A mutating admission handler over objects of type `K`.
///
/// Implemented by every `Fn(AdmissionRequest<K>) -> impl Future<Output =
/// Mutation<K>>`; implement it on a type of your own to hold state.
#[async_trait]
pub trait Mutate<K: AdmissionObject>: Send + Sync + 'static {
    /// Changes, admits or denies `request`. A panic is caught and answered
    /// `500` (see the [module docs](super)).
    async fn mutate(&self, request: AdmissionRequest<K>) -> Mutation<K>;
}

#[async_trait]
impl<K, F, Fut> Mutate<K> for F
where
    K: AdmissionObject,
    F: Fn(AdmissionRequest<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Mutation<K>> + Send,
{
    async fn mutate(&self, request: AdmissionRequest<K>) -> Mutation<K> {
        self(request).await
    }
}

/// A [`Validate`] behind a path.
pub(super) struct Validating<K, V> {
    handler: V,
    objects: PhantomData<fn() -> K>,
}

impl<K, V> Validating<K, V> {
    pub(super) fn new(handler: V) -> Self {
        Self {
            handler,
            objects: PhantomData,
        }
    }
}

#[async_trait]
impl<K: AdmissionObject, V: Validate<K>> Endpoint for Validating<K, V> {
    async fn answer(&self, body: Bytes) -> Answer {
        let request = match decode::<K>(&body) {
            Ok(request) => request,
            Err(message) => return Answer::BadInput(message),
        };
        let response = AdmissionResponse::from(&request);
        let verdict = self.handler.validate(request).await;
        encode(verdict.apply(response))
    }
}

/// A [`Mutate`] behind a path.
pub(super) struct Mutating<K, M> {
    handler: M,
    objects: PhantomData<fn() -> K>,
}

impl<K, M> Mutating<K, M> {
    pub(super) fn new(handler: M) -> Self {
        Self {
            handler,
            objects: PhantomData,
        }
    }
}

#[async_trait]
impl<K: AdmissionObject, M: Mutate<K>> Endpoint for Mutating<K, M> {
    async fn answer(&self, body: Bytes) -> Answer {
        let request = match decode::<K>(&body) {
            Ok(request) => request,
            Err(message) => return Answer::BadInput(message),
        };
        let response = AdmissionResponse::from(&request);
        let original = request.object.clone();
        let Mutation { verdict, change } = self.handler.mutate(request).await;
        let patch = match (verdict.is_allowed(), change) {
            (false, _) | (true, Change::None) => None,
            (true, Change::Patch(patch)) => Some(patch),
            (true, Change::Object(object)) => match patch(original.as_ref(), &object) {
                Ok(patch) => Some(patch),
                Err(message) => return Answer::Failed(message),
            },
        };
        let response = match patch {
            Some(patch) if !patch.0.is_empty() => match response.with_patch(patch) {
                Ok(response) => response,
                Err(error) => return Answer::Failed(format!("encoding the patch failed: {error}")),
            },
            _ => response,
        };
        encode(verdict.apply(response))
    }
}

/// The JSON patch from `original` to `modified`, both encoded by `K`.
pub(super) fn patch<K: Serialize>(
    original: Option<&K>,
    modified: &K,
) -> Result<json_patch::Patch, String> {
    let Some(original) = original else {
        return Err(
            "the mutating handler returned an object for a request without one (a DELETE or CONNECT): return a patch or unchanged"
                .to_owned(),
        );
    };
    let encode = |object: &K| {
        serde_json::to_value(object)
            .map_err(|error| format!("encoding the mutated object failed: {error}"))
    };
    Ok(json_patch::diff(&encode(original)?, &encode(modified)?))
}

/// The request of an `AdmissionReview` of objects of type `K`, or why the
/// body is not one (the message of a `400`).
pub(super) fn decode<K: AdmissionObject>(body: &[u8]) -> Result<AdmissionRequest<K>, String> {
    let review: AdmissionReview<K> = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(error) => return Err(undecodable::<K>(body, &error)),
    };
    if review.types.kind != "AdmissionReview" {
        return Err(format!(
            "expected an AdmissionReview, got kind {:?}",
            review.types.kind
        ));
    }
    let request: AdmissionRequest<K> = review
        .try_into()
        .map_err(|_| "the AdmissionReview has no request".to_owned())?;
    let expected = expected_kind::<K>();
    if !expected.is_empty() && request.kind.kind != expected {
        return Err(format!(
            "this webhook reviews {expected} objects, the request is for a {}",
            request.kind.kind
        ));
    }
    Ok(request)
}

/// Why `body` did not decode as a review of `K`: a review that is
/// malformed, or a well-formed one whose object is not a `K`.
fn undecodable<K: AdmissionObject>(body: &[u8], error: &serde_json::Error) -> String {
    let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) else {
        return format!("malformed AdmissionReview: {error}");
    };
    let expected = expected_kind::<K>();
    match review.request {
        Some(request) if request.kind.kind != expected => format!(
            "this webhook reviews {expected} objects, the request is for a {}",
            request.kind.kind
        ),
        _ => format!("the AdmissionReview's object is not a valid {expected}: {error}"),
    }
}

fn expected_kind<K: AdmissionObject>() -> String {
    K::kind(&K::DynamicType::default()).into_owned()
}

fn encode(response: AdmissionResponse) -> Answer {
    match serde_json::to_vec(&response.into_review()) {
        Ok(json) => Answer::Review(json),
        Err(error) => Answer::Failed(format!("encoding the AdmissionReview failed: {error}")),
    }
}
