//! The ConfigMap-like object of the realistic benches.

use std::collections::BTreeMap;

use tend::{ObjectKey, Revision};

/// A ConfigMap-like object: about 1.7 KB of strings in nested maps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigMap {
    pub(crate) key: ObjectKey,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) data: BTreeMap<String, String>,
    pub(crate) version: Revision,
}

tend::impl_object!(ConfigMap, key: key: ObjectKey, version: version);

/// The `i`th object: its key and values depend on `i`.
pub(crate) fn config_map(i: usize) -> ConfigMap {
    let labels = (0..8)
        .map(|l| {
            (
                format!("app.kubernetes.io/part-{l}"),
                format!("value-{i}-{l}"),
            )
        })
        .collect();
    let annotations = (0..3)
        .map(|a| {
            (
                format!("example.com/note-{a}"),
                format!("{i:08}-{}", "n".repeat(80)),
            )
        })
        .collect();
    let data = (0..4)
        .map(|d| {
            (
                format!("file-{d}.yaml"),
                format!("{i:08}: {}", "d".repeat(230)),
            )
        })
        .collect();
    ConfigMap {
        key: ObjectKey::new(
            format!("namespace-{:03}", i % 100),
            format!("config-{i:07}"),
        ),
        labels,
        annotations,
        data,
        version: Revision::new(1),
    }
}
