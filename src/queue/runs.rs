//! Runs of keys: how a controller's workers take several quick keys under
//! one lock, end them together, and hand back the ones they will not start.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Core, Handed, Next, Restored};
use super::stamp::Stamp;
use super::{QueueKey, Taken, WorkQueue};

/// A key a worker processed, and how long its reconcile took.
pub(crate) type Worked<K> = (K, Duration);

impl<K: QueueKey> WorkQueue<K> {
    /// Ends every key in `done` (emptying it) as [`done`](Self::done) would,
    /// then takes up to `max` ready keys into `taken`, all under one lock:
    /// what a worker does between two runs of reconciles. Beyond the first
    /// key, keys are taken only while more than `spare` stay ready for other
    /// workers. `now` is the caller's reading of tokio's clock (a worker
    /// reads it once to end one reconcile and start the next). `taken` must
    /// be empty; keys in `done` that no worker holds are ignored.
    pub(crate) fn done_and_take(
        &self,
        done: &mut Vec<Worked<K>>,
        now: Instant,
        max: usize,
        spare: usize,
        taken: &mut VecDeque<Handed<K>>,
    ) {
        debug_assert!(taken.is_empty(), "called with keys still to process");
        let now = self.stamp(now);
        let ((requeued, drained, look, fired), ready) = self.with_core(|core| {
            let requeued = end(core, done, now);
            let drained = core.is_idle_after_shutdown();
            let look = self.look(core, now, false);
            let mut fired = 0;
            if matches!(look.0, Next::Key { .. }) {
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
            }
            (requeued, drained, look, fired)
        });
        self.ended(done, drained);
        for _ in 0..fired {
            self.report(|o| o.added());
        }
        let mut count = taken.len();
        if let Taken::Key(handed, _) = self.took(look, ready) {
            taken.push_front(handed);
            count += 1;
        }
        // Keys queued again by these `done`s need workers, unless this one
        // took as many keys.
        for _ in count..requeued.max(count) {
            self.shared.ready.notify_one();
        }
    }

    /// Reports how long `handed` waited in the queue, as its processing
    /// starts at `at`: keys of a run are reported when started, so a key
    /// handed back and taken again is reported once.
    pub(crate) fn started(&self, handed: &Handed<K>, at: Instant) {
        let waited = self.stamp(at).saturating_duration_since(handed.since);
        self.report(|o| o.queued_for(waited));
    }

    /// Ends every key in `done` and hands every key of `unstarted` back
    /// (emptying both), under one lock: for a worker whose reconcile waits,
    /// or that stops. A key handed back is ready again first in its level,
    /// with its marks, priority and age; after shutdown it is dropped (and
    /// counted in [`QueueStats::dropped`](super::QueueStats::dropped)).
    pub(crate) fn release(&self, done: &mut Vec<Worked<K>>, unstarted: &mut VecDeque<Handed<K>>) {
        if done.is_empty() && unstarted.is_empty() {
            return;
        }
        let now = self.now();
        let ((ready_again, dropped, drained), _) = self.with_core(|core| {
            let mut ready_again = end(core, done, now);
            let mut dropped = 0u64;
            // From the back, each first in its level: the run's order stays.
            while let Some(handed) = unstarted.pop_back() {
                match core.restore(handed) {
                    Restored::Ready => ready_again += 1,
                    Restored::Dropped => dropped += 1,
                    Restored::NotInFlight => {}
                }
            }
            (ready_again, dropped, core.is_idle_after_shutdown())
        });
        self.ended(done, drained);
        for _ in 0..ready_again {
            self.shared.ready.notify_one();
        }
        if dropped > 0 {
            self.report(|o| o.dropped(dropped));
        }
    }

    /// After the lock, for keys `end` ended: reports their work (the
    /// worker's own measure: a key's time in flight also counts the keys of
    /// its run before it), empties `done`, and wakes a drain that is over.
    fn ended(&self, done: &mut Vec<Worked<K>>, drained: bool) {
        for (_, took) in done.drain(..) {
            self.report(|o| o.worked_for(took));
        }
        if drained {
            self.shared.drained.notify_waiters();
        }
    }
}

/// Ends the keys of `done` in the core, keeping in `done` only those that
/// were in flight; returns how many were queued again (dirty).
fn end<K: QueueKey>(core: &mut Core<K>, done: &mut Vec<Worked<K>>, now: Stamp) -> usize {
    let mut requeued = 0;
    done.retain(|(key, _)| match core.done(key, now) {
        Ok(finished) => {
            requeued += usize::from(finished.requeued);
            true
        }
        Err(_) => false,
    });
    requeued
}
