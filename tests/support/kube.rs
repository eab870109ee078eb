//! Helpers for the tests against a real API server (`tend::testing::kube`).

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use tend::testing::kube::ControlPlane;

static NAMESPACES: AtomicU64 = AtomicU64::new(0);

/// A client of this binary's shared control plane and a fresh namespace.
pub async fn fresh(prefix: &str) -> (kube::Client, String) {
    let plane = ControlPlane::shared().expect("the test control plane starts");
    let client = plane.client().expect("a client of the test control plane");
    let name = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NAMESPACES.fetch_add(1, Ordering::Relaxed)
    );
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("a fresh namespace");
    (client, name)
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
