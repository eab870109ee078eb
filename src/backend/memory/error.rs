//! The memory backend's errors.

/// Why [`MemoryStore::set_faults`](super::MemoryStore::set_faults) refused a
/// configuration.
///
/// # Examples
///
/// ```
/// use tend::memory::{FaultError, Faults, MemoryStore};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: tend::Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// let store = MemoryStore::<Light>::new("lights");
/// let refused = store.set_faults(Faults { drop: 1.5, ..Faults::default() });
/// assert!(matches!(refused, Err(FaultError::InvalidProbability { name: "drop", .. })));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultError {
    /// A probability was outside `0.0..=1.0` (or NaN).
    #[error("fault probability `{name}` must be within 0..=1, got {value}")]
    InvalidProbability {
        /// The field's name.
        name: &'static str,
        /// The value given.
        value: f64,
    },
}

/// A failure the memory backend produced on purpose (see
/// [`Faults`](super::Faults)); it is the source of a
/// [`SourceError::Unavailable`](crate::source::SourceError::Unavailable).
///
/// # Examples
///
/// ```
/// use tend::memory::{InjectedFault, MemoryStore};
/// use tend::{Source, SourceError};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: tend::Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::<Light>::new("lights");
/// store.fail_next_lists(1);
/// let Err(SourceError::Unavailable(cause)) = store.list().await else { unreachable!() };
/// assert_eq!(cause.downcast_ref::<InjectedFault>(), Some(&InjectedFault::List));
/// assert!(store.list().await.is_ok()); // only the next one failed
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectedFault {
    /// A list failed because [`MemoryStore::fail_next_lists`](super::MemoryStore::fail_next_lists)
    /// asked for it.
    #[error("injected list failure")]
    List,
    /// A watch was cut after delivering this many events.
    #[error("injected watch cut after {events} events")]
    WatchCut {
        /// Events delivered before the cut.
        events: usize,
    },
}
