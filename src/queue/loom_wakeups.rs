//! loom models of the queue's wake-up protocol: how `add`, `add_after`,
//! `done`, `shutdown` and timers wake workers sleeping in `get`, how a woken
//! `get` that is dropped passes its wake-up on, how `shutdown_with_drain`
//! learns that the last key is done, and what the `closed` flag promises.
//!
//! Run with `RUSTFLAGS="--cfg tend_loom" cargo test --lib --release loom`.
//!
//! # What runs
//!
//! Every decision is the shell's own code: the steps of `wake.rs` and of a
//! batch's `Run` (`batch.rs`) on the real `Core` behind the shim's mutex,
//! and `Signals::wake` doing what they return, on a [`Bell`]
//! (`loom_bell.rs`) where the shell has tokio's `Notify`. [`Queue`] holds
//! only the shell's glue around them, each function naming the one it
//! stands for: lock, step, release, wake; and in `get`, register before the
//! look that may sleep, then sleep.
//!
//! # Not modelled, and why that is safe
//!
//! - tokio's `Notify` and timer themselves: the shell relies only on their
//!   documented contract, which [`Bell`] models; their code is tokio's to
//!   check.
//! - The observer and the rate limiter: they wake no one (the limiter only
//!   picks an `add_after` delay).
//! - Priorities and payloads: the core decides them under its lock
//!   (`loom_tests.rs` and the proptests cover that), and they change no
//!   wake-up.
//! - The `closed` flag is only a hint read without the lock (a worker that
//!   reads it late starts one more key); what is modelled is its promise:
//!   once it reads true, the core is shut down.
//! - Many workers, keys and steps: loom explores the interleavings of a few
//!   threads (up to `LOOM_MAX_PREEMPTIONS` preemptions each run);
//!   `tests/queue_stress.rs` runs many.

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use super::Priority;
use super::batch::{Released, Run, Trip};
use super::core::Core;
use super::loom_bell::Bell;
use super::stamp::Stamp;
use super::wake::{Look, Signals, Watching};
use crate::sync::{Mutex, lock};

/// The shell's `Shared`, with bells for its `Notify`s.
struct Queue {
    core: Mutex<Core<u8>>,
    signals: Signals<Bell>,
}

impl Queue {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            core: Mutex::new(Core::new(Duration::from_secs(10))),
            signals: Signals::new(Bell::default(), Bell::default()),
        })
    }

    /// The clock: the `ready` bell's, so that a sleep until a deadline ends
    /// when it moves there.
    fn now(&self) -> Stamp {
        self.signals.ready.now()
    }

    /// `enqueue(When::Now)`.
    fn add(&self, key: u8) {
        let added = lock(&self.core).add(key, Priority::NORMAL, (), || self.now());
        self.signals.wake(added.wake());
    }

    /// `enqueue(When::After)`.
    fn add_after(&self, key: u8, delay: Duration) {
        let now = self.now();
        let scheduled =
            lock(&self.core).add_after(key, now.after(delay), Priority::NORMAL, (), now);
        self.signals.wake(scheduled.wake());
    }

    /// `take_next`.
    fn take_next(
        &self,
        look: impl FnOnce(&mut Core<u8>, Stamp) -> Look<u8, ()>,
    ) -> ControlFlow<Option<u8>, Option<Stamp>> {
        let look = look(&mut lock(&self.core), self.now());
        match look {
            Look::Took { handed, wake, .. } => {
                self.signals.wake(wake);
                Break(Some(handed.key))
            }
            Look::Closed => Break(None),
            Look::Sleep { until, .. } => Continue(until),
        }
    }

    /// `get_handed`.
    fn get(&self) -> Option<u8> {
        if let Break(got) = self.take_next(Core::look) {
            return got;
        }
        loop {
            let mut notified = self.signals.ready.notified();
            notified.enable();
            match self.take_next(Core::look_registered) {
                Break(got) => return got,
                Continue(None) => notified.wait(None),
                Continue(Some(deadline)) => {
                    let _watching = Watching::new(&self.core);
                    notified.wait(Some(deadline));
                }
            }
        }
    }

    /// `get_handed` polled until it sleeps, then dropped: what it took, if
    /// it took a key before sleeping.
    fn get_then_drop(&self) -> Option<u8> {
        if let Break(got) = self.take_next(Core::look) {
            return got;
        }
        let mut notified = self.signals.ready.notified();
        notified.enable();
        match self.take_next(Core::look_registered) {
            Break(got) => got,
            Continue(until) => {
                let _watching = until.map(|_| Watching::new(&self.core));
                None
            }
        }
    }

    /// `done`.
    fn done(&self, key: u8) {
        let now = self.now();
        let ended = lock(&self.core).end(&key, now).expect("in flight");
        self.signals.wake(ended.wake);
    }

    /// `shutdown`.
    fn shutdown(&self) {
        let shut = lock(&self.core).shut();
        self.signals.wake(shut.wake);
    }

    /// `shutdown_with_drain`.
    fn shutdown_with_drain(&self) {
        let (shut, epoch) = lock(&self.core).shut_to_drain();
        self.signals.wake(shut.wake);
        loop {
            let mut notified = self.signals.drained.notified();
            notified.enable();
            if lock(&self.core).is_drained(epoch) {
                return;
            }
            notified.wait(None);
        }
    }

    /// `Batch::refill`, with no spare keys left for other workers.
    fn refill(&self, run: &mut Run<u8, ()>, max: usize) {
        let now = self.now();
        let refilled = run.refill(&mut lock(&self.core), now, max, 0);
        self.signals.wake(refilled.wake);
    }

    /// `Batch::release`.
    fn release(&self, run: &mut Run<u8, ()>) -> Released {
        let now = self.now();
        let released = run.release(&mut lock(&self.core), now);
        self.signals.wake(released.wake);
        released
    }

    /// `Batch::next`: the run's next key, or `Err` with what its release
    /// did when the closed flag was read (the batch then hands out none).
    fn next(&self, run: &mut Run<u8, ()>, max: usize) -> Result<Option<u8>, Released> {
        match run.trip(|| self.signals.is_closed()) {
            Trip::Stay => {}
            Trip::Release => return Err(self.release(run)),
            Trip::Refill => self.refill(run, max),
        }
        Ok(run.pop().map(|handed| handed.key))
    }
}

fn spawn<T: 'static>(
    queue: &Arc<Queue>,
    f: impl FnOnce(&Queue) -> T + 'static,
) -> thread::JoinHandle<T> {
    let queue = Arc::clone(queue);
    thread::spawn(move || f(&queue))
}

#[test]
fn an_add_wakes_a_sleeping_get() {
    loom::model(|| {
        let queue = Queue::new();
        let getter = spawn(&queue, Queue::get);
        queue.add(1);
        assert_eq!(getter.join().expect("getter"), Some(1));
    });
}

#[test]
fn a_get_woken_then_dropped_passes_its_wake_up_on() {
    loom::model(|| {
        let queue = Queue::new();
        let dropped = spawn(&queue, Queue::get_then_drop);
        let getter = spawn(&queue, Queue::get);
        queue.add(1);
        let took = dropped.join().expect("dropped get");
        if took.is_some() {
            // The dropped get took the key before sleeping: another for
            // the getter.
            queue.add(2);
        }
        let got = getter.join().expect("getter");
        assert!(got.is_some() && got != took, "{took:?} then {got:?}");
    });
}

#[test]
fn shutdown_wakes_every_sleeping_get_and_timer_watcher() {
    loom::model(|| {
        let queue = Queue::new();
        // A far timer: a worker that looks after this sleeps until it.
        queue.add_after(9, Duration::from_secs(60));
        let getters = [spawn(&queue, Queue::get), spawn(&queue, Queue::get)];
        queue.shutdown();
        for getter in getters {
            assert_eq!(getter.join().expect("getter"), None);
        }
    });
}

/// Whether the watcher of the timers takes the first timer's key (then
/// another worker must watch the second) or one look fires both (then
/// another worker must take the second key), both keys go out.
#[test]
fn each_timers_key_reaches_a_sleeping_worker() {
    loom::model(|| {
        let queue = Queue::new();
        // Each takes one key and keeps it: the other must take the other.
        let workers = [spawn(&queue, Queue::get), spawn(&queue, Queue::get)];
        let (first, second) = (Duration::from_secs(1), Duration::from_secs(2));
        queue.add_after(2, first);
        queue.add_after(3, second);
        queue
            .signals
            .ready
            .advance_to(Stamp::default().after(first));
        queue
            .signals
            .ready
            .advance_to(Stamp::default().after(second));
        let mut got: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        got.sort_unstable();
        assert_eq!(got, [Some(2), Some(3)]);
    });
}

#[test]
fn a_key_queued_again_by_done_wakes_a_sleeping_get() {
    loom::model(|| {
        let queue = Queue::new();
        queue.add(1);
        assert_eq!(queue.take_next(Core::look), Break(Some(1)));
        let getter = spawn(&queue, Queue::get);
        // Added while in flight: dirty, queued again by `done`.
        queue.add(1);
        queue.done(1);
        assert_eq!(getter.join().expect("getter"), Some(1));
    });
}

#[test]
fn a_drain_wakes_when_the_last_key_is_done() {
    loom::model(|| {
        let queue = Queue::new();
        queue.add(1);
        assert_eq!(queue.take_next(Core::look), Break(Some(1)));
        let worker = spawn(&queue, |queue| {
            queue.add(1);
            queue.done(1);
        });
        queue.shutdown_with_drain();
        worker.join().expect("worker");
        let core = lock(&queue.core);
        assert_eq!(core.in_flight_len(), 0);
        assert_eq!(core.ready_len(), 0, "nothing is queued after shutdown");
    });
}

#[test]
fn a_worker_that_sees_the_closed_flag_finds_the_queue_shut_down() {
    loom::model(|| {
        let queue = Queue::new();
        queue.add(1);
        queue.add(2);
        let mut run = Run::new();
        queue.refill(&mut run, 2);
        // The worker's loop over its batch: no new key starts once closed;
        // the rest is handed back, and dropped by the shut-down core.
        let worker = spawn(&queue, move |queue| {
            loop {
                match queue.next(&mut run, 2) {
                    Ok(Some(key)) => run.finish(key, Duration::ZERO),
                    Ok(None) => return,
                    Err(released) => {
                        assert!(released.dropped > 0, "a key was left to hand back");
                        assert_eq!(released.wake.workers, 0, "no key is ready again");
                        return;
                    }
                }
            }
        });
        queue.shutdown();
        worker.join().expect("worker");
        assert_eq!(lock(&queue.core).in_flight_len(), 0);
    });
}
