//! tend: a controller runtime for level-triggered reconciliation loops.
//!
//! A reconciliation loop declares a destination and stays responsible for it:
//! **observe** the actual state, **compare** it with the desired state, **act**
//! to close the gap, and repeat forever. Because every decision is taken from
//! the state as it is now (not from the event that woke the loop), a dropped or
//! duplicated event, a crash or a restart changes nothing: the next reconcile
//! sees the world as it is and fixes it.
//!
//! The crate is built from small parts, each in its own module:
//!
//! - [`WorkQueue`]: the deduplicating, rate-limited, prioritised queue of keys
//!   that every controller runs on.
//! - [`rate_limit`]: per-key backoff and overall rate limits for retries.

mod queue;
pub mod rate_limit;
mod sync;

pub use queue::{
    DoneError, InFlightKey, Priority, QueueKey, QueueObserver, QueueStats, WorkQueue,
    WorkQueueBuilder,
};
