//! `Lifecycle`: an object's finalizers and its deletion mark (Kubernetes'
//! `metadata.finalizers` and `metadata.deletionTimestamp`).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The finalizers an object carries and, once a delete was asked for while
/// it carried some, when that was.
///
/// A type that supports finalizers keeps a `Lifecycle` in a field and
/// returns it from [`Object::lifecycle`](crate::Object::lifecycle) and
/// [`Object::lifecycle_mut`](crate::Object::lifecycle_mut) (or
/// [`impl_object!`](crate::impl_object)'s `lifecycle:` form). Backends then
/// apply the Kubernetes rules (see [`Client`](crate::client::Client)'s
/// "Finalizers"):
///
/// - a delete of an object with finalizers only marks it
///   ([`deletion`](Self::deletion) set), an update at a new revision;
/// - no finalizer can be added to a marked object;
/// - the write that leaves a marked object without finalizers removes it.
///
/// The mark belongs to the backend: a create clears it and an update keeps
/// the stored one, whatever the object written says.
///
/// # Examples
///
/// A volume that must be detached before it goes: the delete only marks
/// it, and removing the last finalizer removes it.
///
/// ```
/// use tend::memory::MemoryStore;
/// use tend::{Lifecycle, Revision};
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Volume { name: String, lifecycle: Lifecycle, version: Revision }
/// tend::impl_object!(Volume, key: name: String, version: version, lifecycle: lifecycle);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::client::ClientError> {
/// let mut lifecycle = Lifecycle::new();
/// assert!(lifecycle.add_finalizer("example.com/detach"));
/// assert!(!lifecycle.add_finalizer("example.com/detach")); // there already
///
/// let volumes = MemoryStore::new("volumes").client();
/// let key = "data".to_owned();
/// volumes.create(Volume { name: key.clone(), lifecycle, version: Revision::ZERO }).await?;
/// volumes.delete(&key).await?; // marked, not removed: a finalizer is left
/// assert!(volumes.get(&key).await?.unwrap().lifecycle.is_being_deleted());
/// volumes.remove_finalizer(&key, "example.com/detach").await?; // detached
/// assert!(volumes.get(&key).await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion: Option<Deletion>,
}

/// When a delete of an object carrying finalizers was asked for.
///
/// The time is the backend's wall clock (a [`SystemTime`], as Kubernetes'
/// `deletionTimestamp`), not tokio's: it must mean the same to another
/// process after a restart, so a paused tokio clock in tests does not move
/// it.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tend::{Deletion, Lifecycle};
///
/// let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut lifecycle = Lifecycle::new();
/// lifecycle.set_deletion(Some(Deletion::new(asked))); // as a backend's delete does
/// let deletion = lifecycle.deletion().unwrap();
/// assert_eq!(deletion.at(), asked);
///
/// // How long the object has waited for its finalizers:
/// let waited = SystemTime::now().duration_since(deletion.at()).unwrap_or_default();
/// assert!(waited > Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletion {
    at: SystemTime,
}

impl Deletion {
    /// A deletion asked for at `at`.
    #[must_use]
    pub const fn new(at: SystemTime) -> Self {
        Self { at }
    }

    /// A deletion asked for now (the wall clock).
    #[must_use]
    pub fn now() -> Self {
        Self::new(SystemTime::now())
    }

    /// When the deletion was asked for.
    #[must_use]
    pub const fn at(&self) -> SystemTime {
        self.at
    }
}

impl Lifecycle {
    /// No finalizers, not being deleted.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The finalizers, in the order they were added.
    #[must_use]
    pub fn finalizers(&self) -> &[String] {
        &self.finalizers
    }

    /// The finalizers, to change them.
    pub(crate) fn finalizers_mut(&mut self) -> &mut Vec<String> {
        &mut self.finalizers
    }

    /// Whether `name` is one of the finalizers.
    #[must_use]
    pub fn has_finalizer(&self, name: &str) -> bool {
        self.finalizers.iter().any(|f| f == name)
    }

    /// Adds the finalizer `name` unless present; returns whether it was
    /// added.
    pub fn add_finalizer(&mut self, name: &str) -> bool {
        let added = !self.has_finalizer(name);
        if added {
            self.finalizers.push(name.to_owned());
        }
        added
    }

    /// Removes the finalizer `name` if present; returns whether it was
    /// there.
    pub fn remove_finalizer(&mut self, name: &str) -> bool {
        let before = self.finalizers.len();
        self.finalizers.retain(|f| f != name);
        self.finalizers.len() != before
    }

    /// When a delete was asked for, if one was: the object is being
    /// deleted and waits for its finalizers to be removed.
    #[must_use]
    pub fn deletion(&self) -> Option<Deletion> {
        self.deletion
    }

    /// Whether the object is being deleted.
    #[must_use]
    pub fn is_being_deleted(&self) -> bool {
        self.deletion.is_some()
    }

    /// Sets or clears the deletion mark. Backends call it; a client's
    /// writes cannot move the mark (see the [type docs](Self)).
    pub fn set_deletion(&mut self, deletion: Option<Deletion>) {
        self.deletion = deletion;
    }
}
