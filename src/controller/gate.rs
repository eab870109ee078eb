//! Read-your-writes: a key whose reconcile wrote stays in flight until every
//! cache it wrote to has applied those writes, so its next reconcile never
//! sees a cache older than its own writes.
//!
//! The key is not ended in the queue when its reconcile returns: the gate
//! holds it (adds meanwhile mark it dirty, as for any key in flight) and
//! ends it once each cache's applied revision reaches the highest revision
//! the reconcile wrote there, or once the wait's bound passes (counted and
//! logged). No worker waits: one task per controller watches the caches'
//! revisions for every held key. Keys that did not write never meet the
//! gate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ControllerObserver;
use super::Triggers;
use crate::object::Revision;
use crate::queue::{QueueKey, WorkQueue};

/// The keys held for their writes, and how long one may be held.
pub(super) struct Gate<K> {
    bound: Duration,
    held: Mutex<Vec<Waiting<K>>>,
    /// A key was held: the watching task must look again.
    added: Notify,
    /// The watching task stopped: keys are no longer held.
    closed: AtomicBool,
}

struct Waiting<K> {
    key: K,
    /// Per cache (by position): the revision it must reach.
    needs: Vec<(usize, Revision)>,
    until: Instant,
}

impl<K: QueueKey> Gate<K> {
    /// Keys held for their writes.
    pub(super) fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// How long a key may be held after its reconcile ended.
    pub(super) fn bound(&self) -> Duration {
        self.bound
    }

    pub(super) fn new(bound: Duration) -> Self {
        Self {
            bound,
            held: Mutex::new(Vec::new()),
            added: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// After a reconcile of `key` that wrote `writes` (per cache: the highest
    /// revision): holds the key unless every cache has applied them already;
    /// returns it when not held, for the worker to end as usual.
    pub(super) fn hold(
        &self,
        key: K,
        writes: Vec<(usize, Revision)>,
        revisions: &[watch::Receiver<Revision>],
        now: Instant,
    ) -> Option<K> {
        if writes.is_empty() || caught_up(&writes, revisions) {
            return Some(key);
        }
        let mut held = self.held.lock();
        if self.closed.load(Ordering::Acquire) {
            return Some(key);
        }
        held.push(Waiting {
            key,
            needs: writes,
            until: crate::time::deadline(now, self.bound),
        });
        drop(held);
        self.added.notify_one();
        None
    }

    /// Ends held keys in `queue` as the caches catch up (or their wait's
    /// bound passes), until `stop`; then ends every key still held.
    pub(super) async fn run(
        &self,
        queue: WorkQueue<K, Triggers>,
        mut revisions: Vec<watch::Receiver<Revision>>,
        observer: &dyn ControllerObserver,
        stop: CancellationToken,
    ) {
        loop {
            let until = self.held.lock().iter().map(|h| h.until).min();
            let holding = until.is_some();
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                // A key held meanwhile left a permit: not missed.
                () = self.added.notified() => {}
                // Only while holding: controllers that do not write would
                // otherwise wake this task on every change of their caches.
                () = any_changed(&mut revisions), if holding => {}
                () = sleep_until(until) => {}
            }
            self.release(&queue, &revisions, observer, Instant::now());
        }
        let held = {
            let mut held = self.held.lock();
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut *held)
        };
        for Waiting { key, .. } in held {
            let _ = queue.done(&key);
        }
    }

    /// Ends every held key whose caches caught up or whose bound passed.
    fn release(
        &self,
        queue: &WorkQueue<K, Triggers>,
        revisions: &[watch::Receiver<Revision>],
        observer: &dyn ControllerObserver,
        now: Instant,
    ) {
        let mut released = Vec::new();
        self.held.lock().retain_mut(|held| {
            let caught_up = caught_up(&held.needs, revisions);
            if caught_up || held.until <= now {
                released.push((held.key.clone(), caught_up));
            }
            !caught_up && held.until > now
        });
        for (key, caught_up) in released {
            if !caught_up {
                tracing::warn!(key = ?key, bound = ?self.bound, "the caches did not show this key's writes in time; reconciling it anyway");
                observer.read_your_writes_expired();
            }
            let _ = queue.done(&key);
        }
    }
}

/// Whether every cache in `needs` has applied its revision.
fn caught_up(needs: &[(usize, Revision)], revisions: &[watch::Receiver<Revision>]) -> bool {
    needs.iter().all(|(cache, revision)| {
        revisions
            .get(*cache)
            .is_none_or(|r| *r.borrow() >= *revision)
    })
}

/// Waits until some cache's applied revision moves (never, without caches).
async fn any_changed(revisions: &mut [watch::Receiver<Revision>]) {
    if revisions.is_empty() {
        return std::future::pending().await;
    }
    let changes = revisions.iter_mut().map(|r| Box::pin(r.changed()));
    let (changed, _, _) = futures::future::select_all(changes).await;
    if changed.is_err() {
        // An informer gone for good: nothing more will change here.
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(until: Option<Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}
