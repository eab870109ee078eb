//! A worker's batch: the keys it holds between two trips to the queue.
//!
//! From a backlog of quick work a worker takes several keys under one lock
//! (a run), processes them, and ends them together on its next trip, when it
//! takes the next run: one lock per run instead of two per key. The batch is
//! the RAII value that holds them: its keys not started yet (each in flight
//! for this worker) and the keys it finished but has not ended. Releasing it
//! (or dropping it: the worker's task aborted, or a reconcile that waits)
//! ends the finished keys and hands the unstarted ones back, ready again
//! first in their level with their payload, priority and age.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Core, Handed, Next, Restored};
use super::stamp::Stamp;
use super::{Payload, QueueKey, Taken, WorkQueue};

/// See the module docs.
pub(crate) struct Batch<'a, K: QueueKey, T: Payload> {
    queue: &'a WorkQueue<K, T>,
    unstarted: VecDeque<Handed<K, T>>,
    /// Keys processed, with how long each took, to end on the next trip.
    finished: Vec<(K, Duration)>,
}

impl<K: QueueKey, T: Payload> WorkQueue<K, T> {
    /// An empty batch over this queue, for one worker.
    pub(crate) fn batch(&self) -> Batch<'_, K, T> {
        Batch {
            queue: self,
            unstarted: VecDeque::new(),
            finished: Vec::new(),
        }
    }
}

impl<K: QueueKey, T: Payload> Batch<'_, K, T> {
    /// The next key to process, its time in the queue reported as it starts
    /// at `now` (the caller's reading of tokio's clock). When no key is left
    /// unstarted but some are finished, ends those and takes up to `max`
    /// more first (see [`refill`](Self::refill)). Once the queue is shut
    /// down no unstarted key is handed out: they are dropped. `None` when
    /// the batch is empty: wait with [`WorkQueue::get_handed`].
    pub(crate) fn next(&mut self, now: Instant, max: usize, spare: usize) -> Option<Handed<K, T>> {
        if !self.unstarted.is_empty() && self.queue.is_closed() {
            self.release();
        }
        if self.unstarted.is_empty() && !self.finished.is_empty() {
            self.refill(now, max, spare);
        }
        let handed = self.unstarted.pop_front()?;
        let waited = self
            .queue
            .stamp(now)
            .saturating_duration_since(handed.since);
        self.queue.report(|o| o.queued_for(waited));
        Some(handed)
    }

    /// Records that `key` (taken from this batch or from
    /// [`WorkQueue::get_handed`]) was processed in `took`: it is ended on
    /// the next trip to the queue.
    pub(crate) fn finish(&mut self, key: K, took: Duration) {
        self.finished.push((key, took));
    }

    /// Whether the next [`next`](Self::next) goes to the queue to end the
    /// finished keys and take more.
    pub(crate) fn will_refill(&self) -> bool {
        self.unstarted.is_empty() && !self.finished.is_empty()
    }

    /// Whether keys of the current run are still unstarted.
    pub(crate) fn has_unstarted(&self) -> bool {
        !self.unstarted.is_empty()
    }

    /// Ends the finished keys, then takes up to `max` ready keys, all under
    /// one lock. Beyond the first key, keys are taken only while more than
    /// `spare` stay ready for other workers.
    pub(crate) fn refill(&mut self, now: Instant, max: usize, spare: usize) {
        debug_assert!(self.unstarted.is_empty(), "keys still to process");
        let queue = self.queue;
        let now = queue.stamp(now);
        let ((requeued, drained, look, fired), ready) = queue.with_core(|core| {
            let requeued = end(core, &mut self.finished, now);
            let drained = core.is_idle_after_shutdown();
            let look = queue.look(core, now, false);
            let fired = match look.0 {
                Next::Key { .. } => take_more(core, now, max, spare, &mut self.unstarted),
                _ => 0,
            };
            (requeued, drained, look, fired)
        });
        self.ended(drained);
        for _ in 0..fired {
            queue.report(|o| o.added());
        }
        let mut count = self.unstarted.len();
        if let Taken::Key(handed, _) = queue.took(look, ready) {
            self.unstarted.push_front(handed);
            count += 1;
        }
        // Keys queued again by these ends need workers, unless this one
        // took as many keys.
        for _ in count..requeued.max(count) {
            queue.shared.ready.notify_one();
        }
    }

    /// Ends the finished keys and hands every unstarted key back, under one
    /// lock: for a worker whose reconcile waits, or that stops. After
    /// shutdown a key handed back is dropped (and counted in
    /// [`QueueStats::dropped`](super::QueueStats::dropped)).
    pub(crate) fn release(&mut self) {
        if self.finished.is_empty() && self.unstarted.is_empty() {
            return;
        }
        let queue = self.queue;
        let now = queue.now();
        let ((ready_again, dropped, drained), _) = queue.with_core(|core| {
            let mut ready_again = end(core, &mut self.finished, now);
            let mut dropped = 0u64;
            // From the back, each first in its level: the run's order stays.
            while let Some(handed) = self.unstarted.pop_back() {
                match core.restore(handed) {
                    Restored::Ready => ready_again += 1,
                    Restored::Dropped => dropped += 1,
                    Restored::NotInFlight => {}
                }
            }
            (ready_again, dropped, core.is_idle_after_shutdown())
        });
        self.ended(drained);
        for _ in 0..ready_again {
            queue.shared.ready.notify_one();
        }
        if dropped > 0 {
            queue.report(|o| o.dropped(dropped));
        }
    }

    /// After the lock, for the keys `end` ended: reports their work (the
    /// worker's own measure: a key's time in flight also counts the keys of
    /// its run before it), forgets them, and wakes a drain that is over.
    fn ended(&mut self, drained: bool) {
        for (_, took) in self.finished.drain(..) {
            self.queue.report(|o| o.worked_for(took));
        }
        if drained {
            self.queue.shared.drained.notify_waiters();
        }
    }

    /// The unstarted keys, first to start first.
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn unstarted(&self) -> impl Iterator<Item = &Handed<K, T>> {
        self.unstarted.iter()
    }
}

impl<K: QueueKey, T: Payload> Drop for Batch<'_, K, T> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Takes ready keys into `taken` while it holds fewer than `max - 1` (the
/// first key of the run is taken by the caller's look) and more than
/// `spare` stay ready; returns how many timers fired meanwhile.
fn take_more<K: QueueKey, T: Payload>(
    core: &mut Core<K, T>,
    now: Stamp,
    max: usize,
    spare: usize,
    taken: &mut VecDeque<Handed<K, T>>,
) -> usize {
    let mut fired = 0;
    while taken.len() + 1 < max && core.ready_len() > spare {
        match core.next(now) {
            Next::Key {
                handed, fired: f, ..
            } => {
                taken.push_back(handed);
                fired += f;
            }
            Next::Empty { fired: f, .. } => {
                fired += f;
                break;
            }
            Next::ShutDown => break,
        }
    }
    fired
}

/// Ends the keys of `finished` in the core, keeping only those that were in
/// flight; returns how many were queued again (dirty), counting a key
/// debounced again ahead of every other timer as one (a sleeping worker
/// must look again).
fn end<K: QueueKey, T: Payload>(
    core: &mut Core<K, T>,
    finished: &mut Vec<(K, Duration)>,
    now: Stamp,
) -> usize {
    let mut requeued = 0;
    finished.retain(|(key, _)| match core.done(key, now) {
        Ok(done) => {
            requeued += usize::from(done.requeued || done.earliest_timer);
            true
        }
        Err(_) => false,
    });
    requeued
}
