//! What woke a reconcile through a tracked read: the dependency, named.

use std::fmt;

/// A change of a tracked source that woke this reconcile
/// ([`Trigger::Read`](crate::controller::Trigger::Read)): which object of
/// which source changed, and which of the key's last reads it touched.
/// [`Context::read_causes`](crate::controller::Context::read_causes) gives
/// the first one per tracked source since the key's last reconcile began
/// (later changes before it runs coalesce into it, as the queue coalesces
/// the wakes).
///
/// Its `Display` reads `pods/web-1 in pods (index app=web)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCause {
    source: Box<str>,
    changed: Box<str>,
    read: Box<str>,
}

impl ReadCause {
    pub(super) fn new(source: &str, changed: String, read: String) -> Self {
        Self {
            source: source.into(),
            changed: changed.into_boxed_str(),
            read: read.into_boxed_str(),
        }
    }

    /// The tracked source's name (its informer's source).
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The key of the object that changed, as its `Debug` shows it.
    #[must_use]
    pub fn changed(&self) -> &str {
        &self.changed
    }

    /// The read it touched: `its key`, `index app=web`, `keys of index
    /// app=web`, `every object` or `filter ready`.
    #[must_use]
    pub fn read(&self) -> &str {
        &self.read
    }
}

impl fmt::Display for ReadCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {} ({})", self.changed, self.source, self.read)
    }
}
