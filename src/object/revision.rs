//! `Revision`: a position in a source's history.

use std::fmt::{self, Display};

use serde::{Deserialize, Serialize};

/// A position in a source's history: the number of the write that produced a
/// state.
///
/// Revisions only grow. [`Revision::ZERO`] is "before any write".
///
/// A source numbers its writes with one global, increasing [`Revision`] (as
/// etcd does). An object's [`Object::version`](crate::Object::version) is the revision of the write
/// that produced it, so versions of one object only grow, and versions of
/// different objects can be compared. The informer relies on this to ignore
/// stale changes: a change whose revision is not newer than the cached
/// object's is never applied.
///
/// # Examples
///
/// ```
/// use tend::Revision;
/// use tend::memory::MemoryStore;
///
/// #[derive(Clone, Debug)]
/// struct Light { room: String, on: bool, version: Revision }
/// tend::impl_object!(Light, key: room: String, version: version);
///
/// let store = MemoryStore::new("lights");
/// let hall = store.put(Light { room: "hall".into(), on: false, version: Revision::ZERO });
/// assert_eq!(hall.version, Revision::new(1)); // the store's first write
/// let attic = store.put(Light { room: "attic".into(), on: true, version: Revision::ZERO });
/// assert!(attic.version > hall.version); // one global, growing counter
/// assert_eq!(attic.version, hall.version.next());
/// assert_eq!((store.revision().get(), store.revision().to_string()), (2, "2".to_owned()));
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Revision(u64);

impl Revision {
    /// The revision before any write.
    pub const ZERO: Self = Self(0);

    /// Wraps a raw revision number.
    #[must_use]
    pub const fn new(revision: u64) -> Self {
        Self(revision)
    }

    /// The raw revision number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(&self.0, f)
    }
}

impl From<u64> for Revision {
    fn from(revision: u64) -> Self {
        Self(revision)
    }
}
