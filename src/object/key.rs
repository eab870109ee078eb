//! `ObjectKey`: the ready-made Kubernetes-style key.

use std::fmt::{self, Display};

use serde::{Deserialize, Serialize};

/// A ready-made Kubernetes-style key: a name within a namespace.
///
/// Displays as `namespace/name`, or `name` when the namespace is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// The name, unique within the namespace.
    pub name: String,
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
