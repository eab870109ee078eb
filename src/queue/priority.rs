//! Priorities of ready keys.

/// How urgently a key should be processed: higher first, FIFO within a level.
///
/// Controllers add keys from the initial list and from resyncs at
/// [`Priority::LOW`], so that fresh changes ([`Priority::NORMAL`]) are served
/// first. Low priorities never starve: see
/// [`WorkQueueBuilder::max_wait`](crate::WorkQueueBuilder::max_wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Priority(i8);

impl Priority {
    /// Background work: initial lists and resyncs.
    pub const LOW: Self = Self(-1);
    /// The default for [`WorkQueue::add`](crate::WorkQueue::add), timers and retries.
    pub const NORMAL: Self = Self(0);
    /// Ahead of normal work.
    pub const HIGH: Self = Self(1);

    /// A custom level; higher is served first.
    #[must_use]
    pub const fn new(level: i8) -> Self {
        Self(level)
    }

    /// The numeric level.
    #[must_use]
    pub const fn level(self) -> i8 {
        self.0
    }
}
