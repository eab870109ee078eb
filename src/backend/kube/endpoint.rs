//! `Endpoint`: one resource type's URLs on one API server, and the calls
//! the source and the client make, through kube-rs's request builder and
//! client (auth, TLS, kubeconfig and encoding are kube-rs's).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use either::Either;
use futures::Stream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    DeleteParams, GetParams, ListParams, ObjectList, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{Request, Status};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// What tend needs of a kube-rs resource type to list, watch and write it.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::apps::v1::Deployment;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::kube::KubeResource;
///
/// fn sourceable<K: KubeResource>() {}
/// sourceable::<ConfigMap>(); // every k8s-openapi type, and every `CustomResource`
/// sourceable::<Deployment>();
/// ```
pub trait KubeResource:
    Resource + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> KubeResource for K where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

/// A resource type on one API server, seen from one scope: every
/// namespace, or one.
pub(crate) struct Endpoint<K: Resource> {
    client: Client,
    dyntype: K::DynamicType,
    /// The scope of lists and watches (`None`: every namespace, or a
    /// cluster-scoped kind). Writes go to each object's own namespace.
    namespace: Option<String>,
}

impl<K: Resource> Clone for Endpoint<K>
where
    K::DynamicType: Clone,
{
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            dyntype: self.dyntype.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

/// `request` tagged with its verb, as kube-rs's own `Api` does (the tag
/// names the request's tracing span).
fn tagged(
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<http::Request<Vec<u8>>> {
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert(verb);
    Ok(request)
}

impl<K: KubeResource> Endpoint<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    pub(crate) fn new(client: Client, dyntype: K::DynamicType, namespace: Option<String>) -> Self {
        Self {
            client,
            dyntype,
            namespace,
        }
    }

    /// The plural name of the kind (`configmaps`), for logs and metrics.
    pub(crate) fn plural(&self) -> String {
        K::plural(&self.dyntype).into_owned()
    }

    /// The URLs of the scope lists and watches use.
    fn scope(&self) -> Request {
        Request::new(K::url_path(&self.dyntype, self.namespace.as_deref()))
    }

    /// The URLs of objects in `namespace`; an object that names none goes
    /// to the scope's namespace (none for a cluster-scoped kind).
    fn within(&self, namespace: &str) -> Request {
        let namespace = if namespace.is_empty() {
            self.namespace.as_deref()
        } else {
            Some(namespace)
        };
        Request::new(K::url_path(&self.dyntype, namespace))
    }

    pub(crate) async fn list(&self, params: &ListParams) -> kube::Result<ObjectList<K>> {
        let scope = self.scope();
        let request = if K::metadata_api() {
            scope.list_metadata(params)
        } else {
            scope.list(params)
        };
        self.client.request(tagged(request, "list")?).await
    }

    pub(crate) async fn watch(
        &self,
        params: &WatchParams,
        version: &str,
    ) -> kube::Result<impl Stream<Item = kube::Result<WatchEvent<K>>> + use<K>> {
        let scope = self.scope();
        let request = if K::metadata_api() {
            scope.watch_metadata(params, version)
        } else {
            scope.watch(params, version)
        };
        self.client
            .request_events::<K>(tagged(request, "watch")?)
            .await
    }

    /// The object `name` in `namespace`, or `None`.
    pub(crate) async fn get(&self, namespace: &str, name: &str) -> kube::Result<Option<K>> {
        let (within, params) = (self.within(namespace), GetParams::default());
        let request = if K::metadata_api() {
            within.get_metadata(name, &params)
        } else {
            within.get(name, &params)
        };
        match self.client.request(tagged(request, "get")?).await {
            Err(error) if is_missing(&error, name) => Ok(None),
            result => result.map(Some),
        }
    }

    pub(crate) async fn create(&self, namespace: &str, object: &K) -> kube::Result<K> {
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
        let within = self.within(namespace);
        let request = tagged(within.create(&PostParams::default(), body), "create")?;
        self.client.request(request).await
    }

    /// Replaces the object (the server checks `metadata.resourceVersion`);
    /// `status`: its status subresource instead. A metadata-only object
    /// replaces only the metadata a client may write ([`metadata_patch`]):
    /// a `PUT` of it would empty the rest of the object.
    pub(crate) async fn replace(&self, object: &K, status: bool) -> kube::Result<K> {
        let meta = object.meta();
        let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
        let (within, name) = (self.within(namespace.unwrap_or("")), name.unwrap_or(""));
        if K::metadata_api() && !status {
            let patch = Patch::<()>::Json(metadata_patch(meta));
            let request = within.patch_metadata(name, &PatchParams::default(), &patch);
            return self.client.request(tagged(request, "patch")?).await;
        }
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
        let params = PostParams::default();
        let request = if status {
            tagged(
                within.replace_subresource("status", name, &params, body),
                "replace_status",
            )?
        } else {
            tagged(within.replace(name, &params, body), "replace")?
        };
        self.client.request(request).await
    }

    /// Deletes `name`: the object as it is left (marked, while it has
    /// finalizers; or its last state), or the server's status.
    pub(crate) async fn delete(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> kube::Result<Either<K, Status>> {
        let request = tagged(self.within(namespace).delete(name, params), "delete")?;
        self.client.request_status(request).await
    }

    /// Server-side apply of `object` by `manager`. A metadata-only object
    /// is applied as its kind (the server's answer names the kind
    /// `PartialObjectMetadata`, which apply refuses).
    pub(crate) async fn apply(&self, object: &K, params: &PatchParams) -> kube::Result<K> {
        let meta = object.meta();
        let within = self.within(meta.namespace.as_deref().unwrap_or(""));
        let name = meta.name.as_deref().unwrap_or("");
        let request = if K::metadata_api() {
            let body = json!({
                "apiVersion": K::api_version(&self.dyntype),
                "kind": K::kind(&self.dyntype),
                "metadata": meta,
            });
            within.patch_metadata(name, params, &Patch::Apply(body))
        } else {
            within.patch(name, params, &Patch::Apply(object))
        };
        self.client.request(tagged(request, "apply")?).await
    }
}

/// A JSON patch that sets what a client may write of an object's metadata
/// (labels, annotations, finalizers, owner references) to `meta`'s, on
/// the condition of its `resourceVersion`: an update of a metadata-only
/// object, which leaves the rest of the object as it is.
pub(crate) fn metadata_patch(meta: &ObjectMeta) -> json_patch::Patch {
    let set = |field: &str, value: serde_json::Value| {
        json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", field]),
            value,
        })
    };
    let (none, empty) = (BTreeMap::new(), Vec::new());
    json_patch::Patch(vec![
        // The server refuses the patched object with `409 Conflict` when
        // this is not the stored version, as it refuses a `PUT`.
        set("resourceVersion", json!(meta.resource_version)),
        set("labels", json!(meta.labels.as_ref().unwrap_or(&none))),
        set(
            "annotations",
            json!(meta.annotations.as_ref().unwrap_or(&none)),
        ),
        set(
            "finalizers",
            json!(meta.finalizers.as_ref().unwrap_or(&empty)),
        ),
        set(
            "ownerReferences",
            json!(meta.owner_references.as_deref().unwrap_or_default()),
        ),
    ])
}

/// Whether `error` says the object `name` does not exist: a `404` about
/// that name, not one about a route the server lacks (a kind not
/// installed, a status subresource the kind has not) or another object (a
/// missing namespace).
pub(crate) fn is_missing(error: &kube::Error, name: &str) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.code == 404 && status.details.as_ref().is_some_and(|d| d.name == name)
        }
        _ => false,
    }
}

/// How long the server asked to wait: a `429`, or a `503` whose status
/// gives `retryAfterSeconds` (at least a second for a `429` that does not
/// say, as client-go waits); `None` for any other status. Not the other
/// `5xx` that give one (`500 ServerTimeout`, `504 Timeout`): their write
/// may have landed, which `Unavailable` says and `RetryLater` does not.
pub(crate) fn retry_after(status: &Status) -> Option<Duration> {
    let said = status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|&seconds| seconds > 0);
    match status.code {
        429 => Some(Duration::from_secs(said.unwrap_or(1).into())),
        503 => said.map(|seconds| Duration::from_secs(seconds.into())),
        _ => None,
    }
}

/// The HTTP status of an API error (`409`, `410` …), if `error` is one.
pub(crate) fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::response::StatusDetails;

    use super::*;

    fn not_found(details: Option<&str>) -> kube::Error {
        let mut status = Status::failure("not found", "NotFound");
        status.code = 404;
        status.details = details.map(|name| {
            let details = serde_json::json!({ "name": name });
            serde_json::from_value::<StatusDetails>(details).expect("valid details")
        });
        kube::Error::Api(Box::new(status))
    }

    fn status(code: u16, retry_after_seconds: Option<u32>) -> Status {
        let mut status = Status::failure("busy", "TooManyRequests");
        status.code = code;
        status.details = retry_after_seconds.map(|seconds| {
            let details = serde_json::json!({ "retryAfterSeconds": seconds });
            serde_json::from_value::<StatusDetails>(details).expect("valid details")
        });
        status
    }

    #[test]
    fn a_429_or_a_5xx_that_says_when_asks_to_retry_after_that_long() {
        let s = Duration::from_secs;
        assert_eq!(retry_after(&status(429, Some(7))), Some(s(7)));
        assert_eq!(
            retry_after(&status(429, None)),
            Some(s(1)),
            "a 429 that does not say"
        );
        assert_eq!(retry_after(&status(429, Some(0))), Some(s(1)));
        assert_eq!(
            retry_after(&status(503, Some(u32::MAX))),
            Some(s(u32::MAX.into()))
        );
        assert_eq!(
            retry_after(&status(500, None)),
            None,
            "a 5xx that does not say"
        );
        assert_eq!(retry_after(&status(409, Some(3))), None, "not a throttle");
    }

    #[test]
    fn only_a_404_about_the_object_itself_means_it_is_missing() {
        assert!(is_missing(&not_found(Some("web")), "web"));
        assert!(
            !is_missing(&not_found(Some("apps")), "web"),
            "its namespace"
        );
        assert!(
            !is_missing(&not_found(None), "web"),
            "a route the server lacks"
        );
    }
}
