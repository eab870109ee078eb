//! A conversion webhook between two versions of a test CRD: objects
//! written at either version read back at both, and a failed conversion's
//! message reaching the client.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use tempfile::TempDir;
use tend::webhook::{Webhook, WebhookServer};

use super::certs::{Ca, Volume};
use super::configs::{api_error, until};
use super::{LIMIT, Served, setup, within};

const GROUP: &str = "tend.test";

/// v1 has `spec.size`, v2 `spec.replicas`; a negative size cannot convert.
async fn convert(mut object: Value, desired: String) -> Result<Value, String> {
    let spec = object["spec"].as_object_mut().ok_or("no spec")?;
    match desired.as_str() {
        "tend.test/v2" => {
            let size = spec.remove("size").unwrap_or(json!(1));
            if size.as_i64().is_some_and(|size| size < 0) {
                return Err(format!("size {size} cannot be replicas"));
            }
            spec.insert("replicas".into(), size);
        }
        "tend.test/v1" => {
            let replicas = spec.remove("replicas").unwrap_or(json!(1));
            spec.insert("size".into(), replicas);
        }
        other => return Err(format!("unknown version {other}")),
    }
    object["apiVersion"] = Value::String(desired);
    Ok(object)
}

fn version(name: &str, field: &str, storage: bool) -> Value {
    json!({
        "name": name, "served": true, "storage": storage,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "integer"}}},
        }}},
    })
}

fn crd(url: &str, ca_pem: &str) -> CustomResourceDefinition {
    let bundle = k8s_openapi::ByteString(ca_pem.as_bytes().to_vec());
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [version("v1", "size", true), version("v2", "replicas", false)],
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": url, "caBundle": bundle},
                "conversionReviewVersions": ["v1"],
            }},
        },
    }))
    .expect("a valid CRD")
}

fn widgets(client: &kube::Client, namespace: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn widget(version: &str, name: &str, spec: &Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a widget")
}

/// Writes at v1 and at v2, reads each object back at both versions.
async fn written_at_either_version_read_at_both(v1: &Api<DynamicObject>, v2: &Api<DynamicObject>) {
    // Stored at v1 as written; read at v2 through the webhook.
    let made = widget("v1", "small", &json!({"size": 3}));
    until("the CRD to serve v1", |_| {
        let (v1, made) = (v1.clone(), made.clone());
        async move { v1.create(&PostParams::default(), &made).await.ok() }
    })
    .await;
    let read = until("the v2 view of a v1 object", |_| {
        let v2 = v2.clone();
        async move { v2.get("small").await.ok() }
    })
    .await;
    assert_eq!(read.types.as_ref().unwrap().api_version, "tend.test/v2");
    assert_eq!(read.data["spec"], json!({"replicas": 3}));

    // Written at v2: converted to v1 for storage, read back at both.
    let big = widget("v2", "big", &json!({"replicas": 7}));
    within(
        "a v2 create",
        LIMIT,
        v2.create(&PostParams::default(), &big),
    )
    .await
    .expect("a v2 create converts to the storage version");
    let at_v1 = within("a v1 read", LIMIT, v1.get("big"))
        .await
        .expect("read at v1");
    assert_eq!(at_v1.data["spec"], json!({"size": 7}));
    let at_v2 = within("a v2 read", LIMIT, v2.get("big"))
        .await
        .expect("read at v2");
    assert_eq!(at_v2.data["spec"], json!({"replicas": 7}));
    let listed = within("a v2 list", LIMIT, v2.list(&Default::default()))
        .await
        .expect("a list");
    assert_eq!(listed.items.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_convert_between_two_versions_and_read_back_at_both() {
    let (client, namespace) = setup("webhook-convert").await;
    let (ca, dir) = (Ca::new("convert-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .route("/convert", Webhook::conversion(convert)),
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let definition = crd(&served.url("/convert"), &ca.pem());
    within(
        "creating the CRD",
        LIMIT,
        crds.create(&PostParams::default(), &definition),
    )
    .await
    .expect("the CRD is created");
    let (v1, v2) = (
        widgets(&client, &namespace, "v1"),
        widgets(&client, &namespace, "v2"),
    );
    written_at_either_version_read_at_both(&v1, &v2).await;

    // A conversion that fails: its message reaches the client.
    let negative = widget("v1", "negative", &json!({"size": -1}));
    within(
        "a v1 create",
        LIMIT,
        v1.create(&PostParams::default(), &negative),
    )
    .await
    .expect("stored at v1 without a conversion");
    let status = api_error(
        within("a v2 read", LIMIT, v2.get("negative")).await,
        "reading a widget that cannot convert",
    );
    assert!(
        status.message.contains("size -1 cannot be replicas"),
        "{status:?}"
    );
    let answered = r#"controller_runtime_webhook_requests_total{webhook="/convert",code="200"}"#;
    assert!(served.sample(answered) >= 3.0);

    let (name, params) = (format!("widgets.{GROUP}"), DeleteParams::default());
    within("deleting the CRD", LIMIT, crds.delete(&name, &params))
        .await
        .expect("the CRD is deleted");
    served.stop().await;
}
