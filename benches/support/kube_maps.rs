//! What the Kubernetes benches share (`kube_lists`, `kube_sharded_caches`):
//! ConfigMaps of about 1.7 KB, created many at a time.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use tend::kube::KubeSource;
use tend::testing::kube::ControlPlane;

/// A control plane of its own, a fresh namespace named after `prefix` in
/// it, and a source of that namespace's ConfigMaps.
pub async fn start(prefix: &str) -> (ControlPlane, String, KubeSource<ConfigMap>) {
    let plane = ControlPlane::start().await.expect("a control plane");
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    let source = KubeSource::<ConfigMap>::namespaced(client, &namespace);
    (plane, namespace, source)
}

/// The `i`th ConfigMap of about 1.7 KB: labels, annotations and data.
pub fn config_map(namespace: &str, i: usize) -> ConfigMap {
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            format!("shop-{}", i % 50),
        ),
        ("app.kubernetes.io/part-of".to_owned(), "shop".to_owned()),
        ("tier".to_owned(), ["web", "api", "db"][i % 3].to_owned()),
    ]);
    let annotations = BTreeMap::from([(
        "deployment.kubernetes.io/revision".to_owned(),
        (i % 7).to_string(),
    )]);
    let data = (0..12)
        .map(|k| (format!("setting-{k}"), format!("{:0>100}", i * 13 + k)))
        .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("map-{i:06}")),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Creates `count` ConfigMaps in `namespace`, 64 at a time, each passed
/// through `shape` first.
pub async fn fill(
    source: &KubeSource<ConfigMap>,
    namespace: &str,
    count: usize,
    shape: impl Fn(ConfigMap) -> ConfigMap,
) {
    let maps = source.client();
    let created = futures::stream::iter(0..count)
        .map(|i| {
            let maps = maps.clone();
            let map = shape(config_map(namespace, i));
            async move { maps.create(map).await.expect("created") }
        })
        .buffer_unordered(64)
        .count()
        .await;
    assert_eq!(created, count);
}
