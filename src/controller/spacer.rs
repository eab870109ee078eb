//! [`Spacer`]: holds a hot key in flight for a delay after its reconcile
//! (`HotKeyPolicy::spaced_up_to`), so that changes meanwhile mark it dirty
//! and coalesce; ending it then queues it once with all of them.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::QueueKey;
use crate::object::Revision;

/// The revision written per cache of the controller (read-your-writes).
type Writes = Vec<(usize, Revision)>;

/// Keys held until their time, with their reconciles' writes, ended by
/// [`run`](Self::run).
pub(super) struct Spacer<K> {
    held: Mutex<Vec<(Instant, K, Writes)>>,
    added: Notify,
    closed: AtomicBool,
}

impl<K: QueueKey> Spacer<K> {
    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.held.lock().len()
    }

    pub(super) fn new() -> Self {
        Self {
            held: Mutex::new(Vec::new()),
            added: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Holds `key` (in flight) until `until`; gives it back to be ended now
    /// once the spacer stopped.
    pub(super) fn hold(&self, key: K, writes: Writes, until: Instant) -> Option<K> {
        let mut held = self.held.lock();
        if self.closed.load(Ordering::Acquire) {
            return Some(key);
        }
        held.push((until, key, writes));
        drop(held);
        self.added.notify_one();
        None
    }

    /// Hands each held key to `end` at its time, until `stop`; then the
    /// rest at once.
    pub(super) async fn run(&self, end: impl Fn(K, Writes), stop: CancellationToken) {
        loop {
            let next = self.held.lock().iter().map(|(until, ..)| *until).min();
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = self.added.notified() => {}
                () = until(next) => {}
            }
            let now = Instant::now();
            let due: Vec<_> = {
                let mut held = self.held.lock();
                let (due, kept) = std::mem::take(&mut *held)
                    .into_iter()
                    .partition(|(until, ..)| *until <= now);
                *held = kept;
                due
            };
            for (_, key, writes) in due {
                end(key, writes);
            }
        }
        let held = {
            let mut held = self.held.lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut *held)
        };
        for (_, key, writes) in held {
            end(key, writes);
        }
    }
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
