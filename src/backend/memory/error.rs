//! The memory backend's errors.

/// Why [`MemoryStore::set_faults`](super::MemoryStore::set_faults) refused a
/// configuration.
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
