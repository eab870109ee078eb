//! Helpers for the tests against a real API server (`tend::testing::kube`).

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use tend::testing::kube::ControlPlane;

/// A client of this binary's shared control plane and a fresh namespace.
pub async fn fresh(prefix: &str) -> (kube::Client, String) {
    let plane = ControlPlane::shared()
        .await
        .expect("the test control plane starts");
    let client = plane.client().await.expect("a client of the plane");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a fresh namespace");
    (client, namespace)
}

/// A ConfigMap `name` in `namespace` with `data` and `labels`.
pub fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    }
}

/// `map` with `labels` set.
pub fn labelled(mut map: ConfigMap, labels: &[(&str, &str)]) -> ConfigMap {
    map.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    map
}
