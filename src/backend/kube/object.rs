//! Every kube-rs resource is an [`Object`]: no newtype around `Pod` or a
//! `CustomResource`.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::object::{Deletion, Object, ObjectKey, Revision};

/// A `resourceVersion` that is not a number: tend needs growing revisions,
/// which an etcd-backed API server gives (as decimal etcd revisions), but
/// Kubernetes calls them opaque, so another server may not.
///
/// # Examples
///
/// ```
/// use tend::Revision;
/// use tend::kube::{RevisionError, parse_revision};
///
/// assert_eq!(parse_revision("4711"), Ok(Revision::new(4711)));
/// let opaque = parse_revision("a1b2");
/// assert_eq!(opaque, Err(RevisionError { version: "a1b2".into() }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "resourceVersion {version:?} is not a number: tend needs the decimal revisions an etcd-backed API server gives"
)]
pub struct RevisionError {
    /// The resourceVersion as the server sent it.
    pub version: String,
}

/// The revision a `resourceVersion` names.
///
/// # Errors
///
/// [`RevisionError`] when it is not a decimal number.
pub fn parse_revision(version: &str) -> Result<Revision, RevisionError> {
    version
        .parse::<u64>()
        .map(Revision::new)
        .map_err(|_| RevisionError {
            version: version.to_owned(),
        })
}

/// The revision of `object`, checked: its `resourceVersion` as a number.
///
/// # Errors
///
/// [`RevisionError`] when it is missing or not a number.
pub fn revision_of<K: Resource>(object: &K) -> Result<Revision, RevisionError> {
    parse_revision(object.meta().resource_version.as_deref().unwrap_or(""))
}

/// The key of a Kubernetes object: its namespace (empty for
/// cluster-scoped kinds) and name.
pub fn key_of<K: Resource>(object: &K) -> ObjectKey {
    let meta = object.meta();
    ObjectKey::new(
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Any kube-rs resource (k8s-openapi types, `CustomResource` types,
/// `DynamicObject`) is an object keyed by namespace and name.
///
/// - Its version is `metadata.resourceVersion` read as a number;
///   [`Revision::ZERO`] when absent (never stored) or not a number. The
///   Kubernetes [`KubeSource`](super::KubeSource) and client check every
///   revision they are given and fail with [`RevisionError`] instead of
///   handing out an object whose version would read as zero.
/// - Its generation is `metadata.generation`, which the API server bumps on
///   spec changes.
/// - Its finalizers and deletion mark are `metadata.finalizers` and
///   `metadata.deletionTimestamp`, which the API server enforces.
impl<K> Object for K
where
    K: Resource + Clone + Send + Sync + 'static,
{
    type Key = ObjectKey;

    fn key(&self) -> ObjectKey {
        key_of(self)
    }

    fn version(&self) -> Revision {
        revision_of(self).unwrap_or(Revision::ZERO)
    }

    fn set_version(&mut self, version: Revision) {
        self.meta_mut().resource_version =
            (version != Revision::ZERO).then(|| version.get().to_string());
    }

    fn generation(&self) -> Option<u64> {
        self.meta()
            .generation
            .and_then(|generation| u64::try_from(generation).ok())
    }

    fn set_generation(&mut self, generation: u64) {
        self.meta_mut().generation = i64::try_from(generation).ok();
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.meta().labels.as_ref()
    }

    fn annotations(&self) -> Option<&BTreeMap<String, String>> {
        self.meta().annotations.as_ref()
    }

    fn finalizer_names(&self) -> Option<&[String]> {
        Some(self.meta().finalizers.as_deref().unwrap_or_default())
    }

    fn finalizer_names_mut(&mut self) -> Option<&mut Vec<String>> {
        Some(self.meta_mut().finalizers.get_or_insert_with(Vec::new))
    }

    fn deletion(&self) -> Option<Deletion> {
        let at = self.meta().deletion_timestamp.as_ref()?;
        Some(Deletion::new(SystemTime::from(at.0)))
    }

    fn set_deletion(&mut self, deletion: Option<Deletion>) {
        self.meta_mut().deletion_timestamp = deletion
            .and_then(|deletion| Timestamp::try_from(deletion.at()).ok())
            .map(Time);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn config_map(namespace: Option<&str>, version: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("settings".to_owned()),
                namespace: namespace.map(str::to_owned),
                resource_version: version.map(str::to_owned),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_config_map_is_an_object_keyed_by_namespace_and_name() {
        let map = config_map(Some("apps"), Some("4711"));
        assert_eq!(map.key(), ObjectKey::new("apps", "settings"));
        assert_eq!(map.version(), Revision::new(4711));
        assert_eq!(config_map(None, None).key().to_string(), "settings");
    }

    #[test]
    fn versions_round_trip_and_zero_means_never_stored() {
        let mut map = config_map(Some("apps"), None);
        assert_eq!(map.version(), Revision::ZERO);
        map.set_version(Revision::new(u64::MAX));
        assert_eq!(
            map.metadata.resource_version.as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(map.version(), Revision::new(u64::MAX));
        map.set_version(Revision::ZERO);
        assert_eq!(map.metadata.resource_version, None);
    }

    #[test]
    fn a_non_numeric_resource_version_is_a_typed_error() {
        let map = config_map(Some("apps"), Some("opaque-42"));
        let error = revision_of(&map).expect_err("not a number");
        assert_eq!(error.version, "opaque-42");
        assert!(error.to_string().contains("not a number"), "{error}");
        assert!(parse_revision("").is_err(), "empty");
        assert!(parse_revision("-1").is_err(), "negative");
        assert!(
            parse_revision("18446744073709551616").is_err(),
            "above u64::MAX"
        );
    }

    #[test]
    fn finalizers_and_the_deletion_mark_live_in_the_metadata() {
        let mut map = config_map(Some("apps"), Some("1"));
        assert_eq!(map.finalizer_names(), Some(&[][..]));
        map.finalizer_names_mut()
            .expect("supported")
            .push("tend.dev/cleanup".to_owned());
        assert_eq!(
            map.metadata.finalizers.as_deref(),
            Some(&["tend.dev/cleanup".to_owned()][..])
        );
        assert!(map.deletion().is_none());
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        map.set_deletion(Some(Deletion::new(at)));
        assert_eq!(map.deletion().map(|d| d.at()), Some(at));
        map.set_deletion(None);
        assert!(map.metadata.deletion_timestamp.is_none());
    }

    #[test]
    fn generations_out_of_range_are_none() {
        let mut map = config_map(Some("apps"), Some("1"));
        map.metadata.generation = Some(-3);
        assert_eq!(map.generation(), None);
        map.set_generation(u64::MAX);
        assert_eq!(map.metadata.generation, None);
        map.set_generation(7);
        assert_eq!(map.generation(), Some(7));
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn bad_bytes_never_panic_resource_versions(text in crate::fuzz::text_near(&["4711", "0", "18446744073709551615"])) {
            let parsed = parse_revision(&text);
            let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
            proptest::prop_assert!(parsed.is_ok() || !digits || text.len() >= 20, "{text:?}: {parsed:?}");
        }

        #[test]
        fn bad_bytes_never_panic_an_object_read_from_the_api_server(
            json in crate::fuzz::bytes_near(vec![POD.as_bytes().to_vec()])
        ) {
            use k8s_openapi::api::core::v1::Pod;
            if let Ok(pod) = serde_json::from_slice::<Pod>(&json) {
                let _ = key_of(&pod);
                let _ = revision_of(&pod);
                let _ = crate::Object::deletion(&pod);
                let _ = crate::Object::labels(&pod);
            }
        }
    }

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"shop","resourceVersion":"4711","generation":2,"labels":{"app":"web"},"finalizers":["example.com/x"],"deletionTimestamp":"2026-12-01T10:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":"u1","controller":true}]},"spec":{"containers":[{"name":"app","image":"web:1"}]}}"#;
}
