//! Public behaviour of `WorkQueue`, on tokio's paused clock.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tend::rate_limit::{ExponentialBackoff, TokenBucket};
use tend::{Payload, Priority, QueueKey, QueueObserver, When, WorkQueue};
use tokio::time::{Instant, advance, timeout};

mod dedup;
mod groups;
mod observer;
mod payloads;
mod priority;
mod rate_limit;
mod shutdown;
mod timers;
mod wakeups;

const LIMIT: Duration = Duration::from_secs(3600);

/// The next key, failing the test if none comes within an hour of paused time.
async fn next<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>) -> K {
    next_with_payload(queue).await.0
}

/// [`next`], with its payload.
async fn next_with_payload<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>) -> (K, T) {
    timeout(LIMIT, queue.get_with_payload())
        .await
        .expect("no key was handed out within the time limit")
        .expect("the queue was shut down")
}

/// Asserts that no key is handed out for `wait`.
async fn assert_nothing_for<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>, wait: Duration) {
    if let Ok(got) = timeout(wait, queue.get()).await {
        panic!("expected no key for {wait:?}, got {got:?}");
    }
}
