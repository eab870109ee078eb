//! Priorities of ready keys.

/// How urgently a key should be processed: higher first, FIFO within a level.
///
/// Controllers add keys from the initial list and from resyncs at
/// [`Priority::LOW`], so that fresh changes ([`Priority::NORMAL`]) are served
/// first. Low priorities never starve: see
/// [`WorkQueueBuilder::max_wait`](crate::WorkQueueBuilder::max_wait).
///
/// # Examples
///
/// ```
/// use tend::{Priority, WorkQueue};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = WorkQueue::new();
/// queue.add_prioritized("resynced", Priority::LOW);
/// queue.add("changed"); // Priority::NORMAL
/// queue.add_prioritized("urgent", Priority::HIGH);
/// assert_eq!(queue.get().await, Some("urgent"));
/// assert_eq!(queue.get().await, Some("changed"));
/// assert_eq!(queue.get().await, Some("resynced"));
/// assert!(Priority::new(5) > Priority::HIGH);
/// assert_eq!(Priority::default(), Priority::NORMAL);
/// # }
/// ```
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
