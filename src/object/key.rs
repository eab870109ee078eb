//! `ObjectKey`: the ready-made Kubernetes-style key.

use std::fmt::{self, Display};

use serde::{Deserialize, Serialize};

/// A ready-made Kubernetes-style key: a name within a namespace.
///
/// Displays as `namespace/name`, or `name` when the namespace is empty.
///
/// # Examples
///
/// ```
/// use tend::{Object, ObjectKey, Revision};
///
/// let web = ObjectKey::new("shop", "web-1");
/// assert_eq!(web.to_string(), "shop/web-1");
/// let node = ObjectKey::cluster("node-0"); // cluster-scoped: no namespace
/// assert_eq!(node.to_string(), "node-0");
/// assert!(node < web); // ordered by namespace, then name
///
/// // As an object's key:
/// #[derive(Clone, Debug)]
/// struct Pod { key: ObjectKey, node: String, version: Revision }
/// tend::impl_object!(Pod, key: key: ObjectKey, version: version);
/// let pod = Pod { key: web.clone(), node: "node-0".into(), version: Revision::ZERO };
/// assert_eq!(pod.key(), web);
/// ```
#[derive(Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// The name, unique within the namespace.
    pub name: String,
}

impl Clone for ObjectKey {
    fn clone(&self) -> Self {
        Self {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Reuses this key's buffers (the derived `clone_from` would not): a
    /// controller's journal overwrites its oldest entry's key this way.
    fn clone_from(&mut self, source: &Self) {
        self.namespace.clone_from(&source.namespace);
        self.name.clone_from(&source.name);
    }
}

impl ObjectKey {
    /// A key for `name` in `namespace`.
    #[must_use]
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A key for a cluster-scoped object (empty namespace).
    #[must_use]
    pub fn cluster(name: impl Into<String>) -> Self {
        Self::new(String::new(), name)
    }
}

impl Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}
