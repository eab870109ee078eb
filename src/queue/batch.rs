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
//!
//! The keys, and what a trip to the queue does with them under the core's
//! lock, are a `Run`: synchronous, no tokio, so the loom models drive it.
//! The batch is a run and the queue it goes to.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Core, Handed, Next, Restored};
use super::stamp::Stamp;
use super::wake::{Look, Wake};
use super::{Payload, QueueKey, WorkQueue};

/// See the module docs.
pub(crate) struct Batch<'a, K: QueueKey, T: Payload> {
    queue: &'a WorkQueue<K, T>,
    run: Run<K, T>,
}

/// A batch's keys, and the steps of a trip to the queue.
#[derive(Debug)]
pub(crate) struct Run<K, T> {
    unstarted: VecDeque<Handed<K, T>>,
    /// Keys processed, with how long each took, to end on the next trip.
    finished: Vec<(K, Duration)>,
}

/// What a batch does before it hands out its next key ([`Run::trip`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trip {
    /// Nothing: hand out the next unstarted key, if any.
    Stay,
    /// The queue is shut down: end the finished keys, hand the rest back.
    Release,
    /// Nothing unstarted: end the finished keys and take more.
    Refill,
}

/// What [`Run::refill`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refilled {
    /// Timers that fired while taking keys: each an add.
    pub(crate) fired: usize,
    pub(crate) wake: Wake,
}

/// What [`Run::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    /// Keys handed back after shutdown, and so dropped.
    pub(crate) dropped: u64,
    pub(crate) wake: Wake,
}

impl<K: QueueKey, T: Payload> WorkQueue<K, T> {
    /// How long a key handed out at `now` had waited since it was ready
    /// (`since`, a [`Handed`]'s).
    pub(crate) fn waited(&self, now: Instant, since: Stamp) -> Duration {
        self.stamp(now).saturating_duration_since(since)
    }

    /// An empty batch over this queue, for one worker.
    pub(crate) fn batch(&self) -> Batch<'_, K, T> {
        Batch {
            queue: self,
            run: Run::new(),
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
        match self.run.trip(|| self.queue.is_closed()) {
            Trip::Stay => {}
            Trip::Release => self.release(),
            Trip::Refill => self.refill(now, max, spare),
        }
        let handed = self.run.pop()?;
        let waited = self.queue.waited(now, handed.since);
        self.queue.report(|o| o.queued_for(waited));
        Some(handed)
    }

    /// Records that `key` (taken from this batch or from
    /// [`WorkQueue::get_handed`]) was processed in `took`: it is ended on
    /// the next trip to the queue.
    pub(crate) fn finish(&mut self, key: K, took: Duration) {
        self.run.finish(key, took);
    }

    /// Whether the next [`next`](Self::next) goes to the queue to end the
    /// finished keys and take more.
    pub(crate) fn will_refill(&self) -> bool {
        self.run.trip(|| false) == Trip::Refill
    }

    /// Whether keys of the current run are still unstarted.
    pub(crate) fn has_unstarted(&self) -> bool {
        !self.run.unstarted.is_empty()
    }

    /// Ends the finished keys, then takes up to `max` ready keys, all under
    /// one lock. Beyond the first key, keys are taken only while more than
    /// `spare` stay ready for other workers.
    pub(crate) fn refill(&mut self, now: Instant, max: usize, spare: usize) {
        let queue = self.queue;
        let now = queue.stamp(now);
        let refilled = queue.with_core(|core| self.run.refill(core, now, max, spare));
        self.ended();
        for _ in 0..refilled.fired {
            queue.report(|o| o.added());
        }
        queue.shared.signals.wake(refilled.wake);
    }

    /// Ends the finished keys and hands every unstarted key back, under one
    /// lock: for a worker whose reconcile waits, or that stops. After
    /// shutdown a key handed back is dropped (and counted in
    /// [`QueueStats::dropped`](super::QueueStats::dropped)).
    pub(crate) fn release(&mut self) {
        if self.run.is_empty() {
            return;
        }
        let queue = self.queue;
        let now = queue.now();
        let released = queue.with_core(|core| self.run.release(core, now));
        self.ended();
        queue.shared.signals.wake(released.wake);
        if released.dropped > 0 {
            queue.report(|o| o.dropped(released.dropped));
        }
    }

    /// After the lock, for the keys the trip ended: reports their work (the
    /// worker's own measure: a key's time in flight also counts the keys of
    /// its run before it).
    fn ended(&mut self) {
        for took in self.run.ended() {
            self.queue.report(|o| o.worked_for(took));
        }
    }

    /// The unstarted keys, first to start first.
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn unstarted(&self) -> impl Iterator<Item = &Handed<K, T>> {
        self.run.unstarted.iter()
    }
}

impl<K: QueueKey, T: Payload> Drop for Batch<'_, K, T> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<K: QueueKey, T: Payload> Run<K, T> {
    /// No keys.
    pub(crate) fn new() -> Self {
        Self {
            unstarted: VecDeque::new(),
            finished: Vec::new(),
        }
    }

    /// What to do before the next key is handed out; `closed` is asked only
    /// while keys are unstarted.
    pub(crate) fn trip(&self, closed: impl FnOnce() -> bool) -> Trip {
        if !self.unstarted.is_empty() {
            return if closed() { Trip::Release } else { Trip::Stay };
        }
        if self.finished.is_empty() {
            Trip::Stay
        } else {
            Trip::Refill
        }
    }

    /// The next unstarted key.
    pub(crate) fn pop(&mut self) -> Option<Handed<K, T>> {
        self.unstarted.pop_front()
    }

    /// Records `key` as processed in `took`, to end on the next trip.
    pub(crate) fn finish(&mut self, key: K, took: Duration) {
        self.finished.push((key, took));
    }

    /// Whether the run holds no key, unstarted or finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.unstarted.is_empty() && self.finished.is_empty()
    }

    /// Under the core's lock: ends the finished keys, then takes up to
    /// `max` ready keys, beyond the first only while more than `spare` stay
    /// ready for other workers. Keys queued again by these ends wake a
    /// worker each, less the keys this run took.
    pub(crate) fn refill(
        &mut self,
        core: &mut Core<K, T>,
        now: Stamp,
        max: usize,
        spare: usize,
    ) -> Refilled {
        debug_assert!(self.unstarted.is_empty(), "keys still to process");
        let requeued = end(core, &mut self.finished, now);
        let drains = core.is_idle_after_shutdown();
        let unstarted = &mut self.unstarted;
        let mut fired = 0;
        let look = core.look_and_take(now, |core| {
            fired = take_more(core, now, max, spare, unstarted);
        });
        let mut wake = Wake {
            drains,
            ..Wake::NONE
        };
        match look {
            Look::Took {
                handed,
                fired: first,
                wake: others,
                ..
            } => {
                self.unstarted.push_front(handed);
                fired += first;
                wake.workers = others.workers;
            }
            Look::Sleep { fired: first, .. } => fired += first,
            Look::Closed => {}
        }
        wake.workers += requeued.saturating_sub(self.unstarted.len());
        Refilled { fired, wake }
    }

    /// Under the core's lock: ends the finished keys and hands every
    /// unstarted key back (dropped after shutdown); each key ready again
    /// wakes a worker.
    pub(crate) fn release(&mut self, core: &mut Core<K, T>, now: Stamp) -> Released {
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
        Released {
            dropped,
            wake: Wake {
                drains: core.is_idle_after_shutdown(),
                ..Wake::workers(ready_again)
            },
        }
    }

    /// After a trip: how long each key it ended took, forgetting them.
    pub(crate) fn ended(&mut self) -> impl Iterator<Item = Duration> + '_ {
        self.finished.drain(..).map(|(_, took)| took)
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
            requeued += done.workers();
            true
        }
        Err(_) => false,
    });
    requeued
}
