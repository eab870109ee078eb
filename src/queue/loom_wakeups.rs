//! loom models of the queue's wake-up protocol: how `add`, `add_after`,
//! `done`, `shutdown` and timers wake workers sleeping in `get`, how a woken
//! `get` that is dropped passes its wake-up on, how `shutdown_with_drain`
//! learns that the last key is done, and what the `closed` flag promises.
//!
//! Run with `RUSTFLAGS="--cfg tend_loom" cargo test --lib --release loom`.
//!
//! # A replica, and what it stands for
//!
//! The shell (`mod.rs`) sleeps on tokio's `Notify` and `sleep_until`, which
//! loom cannot run: loom explores only its own primitives, and tokio's own
//! loom build needs a global `--cfg loom`, which also removes the
//! `tokio::signal` the manager needs. So this file replays the shell's
//! steps, in the shell's order, on the real `Core` behind the shim's mutex,
//! with two stand-ins:
//!
//! - [`Bell`] is tokio's `Notify` as its documentation specifies it: a
//!   `notify_one` wakes the oldest registered waiter, or stores one permit
//!   when none is registered; `notify_waiters` wakes every registered waiter
//!   and every `Notified` created before the call, and stores nothing; a
//!   waiter chosen by `notify_one` and dropped before it took the wake-up
//!   passes it on (to the next waiter, or as the permit).
//! - Time is the bell's clock, moved by the test's main thread. A sleep
//!   until a deadline is a wait on the bell that also ends once the clock
//!   reaches the deadline, as tokio's timer then wakes the task.
//!
//! Each replica step names the shell function it mirrors. The replica is
//! kept in step by hand: a change in `mod.rs` to the order of registering,
//! looking, locking and notifying must be made here too.
//!
//! # Not modelled, and why that is safe
//!
//! - tokio's `Notify` and timer themselves: the shell relies only on their
//!   documented contract, modelled above; their code is tokio's to check.
//! - The observer and the rate limiter: they wake no one (the limiter only
//!   picks an `add_after` delay).
//! - Priorities, payloads and runs (`Batch::refill`, `Batch::release` in `batch.rs`):
//!   the core decides them under its lock (`loom_tests.rs` and the
//!   proptests cover that), and their wake-ups are those modelled here: a
//!   `notify_one` per key made ready (less those the worker takes itself),
//!   and the drain's `notify_waiters` once nothing is in flight.
//! - The `closed` flag is only a hint read without the lock (a worker that
//!   reads it late starts one more key); what is modelled is its promise:
//!   once it reads true, the core is shut down.
//! - Many workers, keys and steps: loom explores the interleavings of a few
//!   threads (up to `LOOM_MAX_PREEMPTIONS` preemptions each run);
//!   `tests/queue_stress.rs` runs many.

use std::collections::VecDeque;
use std::sync::PoisonError;
use std::time::Duration;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Condvar};
use loom::thread;

use super::Priority;
use super::core::{Added, Core, Handed, Next, Restored, Scheduled};
use super::stamp::Stamp;
use crate::sync::{Mutex, MutexGuard, lock};

/// tokio's `Notify`, as specified (see the module docs), plus the clock.
#[derive(Default)]
struct Bell {
    rings: Mutex<Rings>,
    rung: Condvar,
}

#[derive(Default)]
struct Rings {
    /// A `notify_one` that found no waiter.
    permit: bool,
    /// Registered waiters, oldest first.
    waiting: VecDeque<usize>,
    /// Waiters a `notify_one` chose, until they take the wake-up.
    chosen: Vec<usize>,
    /// `notify_waiters` calls so far.
    broadcasts: usize,
    next_id: usize,
    /// The clock, in stamp units.
    now: u64,
}

impl Rings {
    fn notify_one(&mut self) {
        match self.waiting.pop_front() {
            Some(id) => self.chosen.push(id),
            None => self.permit = true,
        }
    }

    /// Takes `id`'s wake-up if a `notify_one` chose it.
    fn take_chosen(&mut self, id: usize) -> bool {
        let at = self.chosen.iter().position(|c| *c == id);
        at.map(|at| self.chosen.swap_remove(at)).is_some()
    }
}

impl Bell {
    fn lock(&self) -> MutexGuard<'_, Rings> {
        lock(&self.rings)
    }

    /// `Notify::notified`: not registered yet, but it sees every
    /// `notify_waiters` from now on.
    fn notified(&self) -> Notified<'_> {
        let mut rings = self.lock();
        rings.next_id += 1;
        Notified {
            bell: self,
            id: rings.next_id,
            broadcasts: rings.broadcasts,
            state: State::Init,
        }
    }

    fn notify_one(&self) {
        self.lock().notify_one();
        self.rung.notify_all();
    }

    fn notify_waiters(&self) {
        let mut rings = self.lock();
        rings.broadcasts += 1;
        rings.waiting.clear();
        drop(rings);
        self.rung.notify_all();
    }

    fn now(&self) -> Stamp {
        Stamp(self.lock().now)
    }

    /// Moves the clock to `at`; sleepers until then wake.
    fn advance_to(&self, at: Stamp) {
        let mut rings = self.lock();
        rings.now = rings.now.max(at.0);
        drop(rings);
        self.rung.notify_all();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Init,
    Waiting,
    Done,
}

/// tokio's `Notified`.
struct Notified<'a> {
    bell: &'a Bell,
    id: usize,
    /// `notify_waiters` calls when it was created.
    broadcasts: usize,
    state: State,
}

impl Notified<'_> {
    /// `Notified::enable`: takes the permit or a broadcast since creation,
    /// or registers as a waiter.
    fn enable(&mut self) {
        let mut rings = self.bell.lock();
        self.poll(&mut rings);
    }

    /// One poll: whether the wake-up came (registering on the first).
    fn poll(&mut self, rings: &mut Rings) -> bool {
        let broadcast = rings.broadcasts != self.broadcasts;
        self.state = match self.state {
            // The permit first, as tokio takes it.
            State::Init if rings.permit => {
                rings.permit = false;
                State::Done
            }
            State::Init if broadcast => State::Done,
            State::Init => {
                rings.waiting.push_back(self.id);
                State::Waiting
            }
            State::Waiting if rings.take_chosen(self.id) || broadcast => State::Done,
            state => state,
        };
        self.state == State::Done
    }

    /// `.await`, or with a deadline `select!` with `sleep_until`: returns
    /// when woken or when the clock reaches the deadline.
    fn wait(&mut self, deadline: Option<Stamp>) {
        let mut rings = self.bell.lock();
        while !self.poll(&mut rings) && deadline.is_none_or(|d| rings.now < d.0) {
            rings = self
                .bell
                .rung
                .wait(rings)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Notified<'_> {
    /// tokio's `Notified` drop: leaves the list, and passes a `notify_one`
    /// wake-up it did not take to the next waiter (or the permit).
    fn drop(&mut self) {
        if self.state != State::Waiting {
            return;
        }
        let mut rings = self.bell.lock();
        rings.waiting.retain(|id| *id != self.id);
        if rings.take_chosen(self.id) {
            rings.notify_one();
            drop(rings);
            self.bell.rung.notify_all();
        }
    }
}

/// The shell's `Shared`, with bells for its `Notify`s.
struct Queue {
    core: Mutex<Core<u8>>,
    ready: Bell,
    drained: Bell,
    closed: AtomicBool,
}

/// `Taken`: what one look found.
enum Taken {
    Key(u8),
    ShutDown,
    Empty(Option<Stamp>),
}

/// `TimerWatch`: counts a worker as sleeping until the earliest timer.
struct TimerWatch<'a>(&'a Queue);

impl Drop for TimerWatch<'_> {
    fn drop(&mut self) {
        lock(&self.0.core).unwatch_timers();
    }
}

impl Queue {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            core: Mutex::new(Core::new(Duration::from_secs(10))),
            ready: Bell::default(),
            drained: Bell::default(),
            closed: AtomicBool::new(false),
        })
    }

    /// `enqueue(When::Now)` and `after_add`.
    fn add(&self, key: u8) {
        let added = lock(&self.core).add(key, Priority::NORMAL, (), || self.ready.now());
        if added == Added::Queued {
            self.ready.notify_one();
        }
    }

    /// `enqueue(When::After)` and `after_schedule`.
    fn add_after(&self, key: u8, delay: Duration) {
        let now = self.ready.now();
        let scheduled =
            lock(&self.core).add_after(key, now.after(delay), Priority::NORMAL, (), now);
        if matches!(
            scheduled,
            Scheduled::Now(Added::Queued) | Scheduled::Timer { earliest: true }
        ) {
            self.ready.notify_one();
        }
    }

    /// `take_next`: `look` under the lock (reading the clock there), then
    /// `took`'s wake-ups.
    fn take_next(&self, will_wait: bool) -> Taken {
        let (next, unwatched, ready) = {
            let mut core = lock(&self.core);
            let next = core.next(self.ready.now());
            if will_wait
                && matches!(
                    next,
                    Next::Empty {
                        wake_at: Some(_),
                        ..
                    }
                )
            {
                core.watch_timers();
            }
            let unwatched = matches!(next, Next::Key { .. }) && core.timers_unwatched();
            (next, unwatched, core.ready_len())
        };
        match next {
            Next::Key { handed, fired, .. } => {
                for _ in 0..fired.min(ready) + usize::from(unwatched) {
                    self.ready.notify_one();
                }
                Taken::Key(handed.key)
            }
            Next::ShutDown => Taken::ShutDown,
            Next::Empty { wake_at, .. } => Taken::Empty(wake_at),
        }
    }

    /// `get_handed`: the fast path, then `wait_next`.
    fn get(&self) -> Option<u8> {
        match self.take_next(false) {
            Taken::Key(key) => return Some(key),
            Taken::ShutDown => return None,
            Taken::Empty(_) => {}
        }
        loop {
            if let Err(got) = self.wait_once() {
                return got;
            }
        }
    }

    /// One turn of `wait_next`'s loop: `Err` with what `get` returns, or
    /// `Ok` to look again.
    fn wait_once(&self) -> Result<(), Option<u8>> {
        let mut notified = self.ready.notified();
        notified.enable();
        match self.take_next(true) {
            Taken::Key(key) => Err(Some(key)),
            Taken::ShutDown => Err(None),
            Taken::Empty(None) => {
                notified.wait(None);
                Ok(())
            }
            Taken::Empty(Some(deadline)) => {
                let _watching = TimerWatch(self);
                notified.wait(Some(deadline));
                Ok(())
            }
        }
    }

    /// A `get` polled until it sleeps, then dropped: what it took, if it
    /// took a key before sleeping.
    fn get_then_drop(&self) -> Option<u8> {
        match self.take_next(false) {
            Taken::Key(key) => return Some(key),
            Taken::ShutDown => return None,
            Taken::Empty(_) => {}
        }
        let mut notified = self.ready.notified();
        notified.enable();
        match self.take_next(true) {
            Taken::Key(key) => Some(key),
            Taken::ShutDown => None,
            Taken::Empty(wake_at) => {
                let _watching = wake_at.map(|_| TimerWatch(self));
                None
            }
        }
    }

    /// `done`.
    fn done(&self, key: u8) {
        let now = self.ready.now();
        let (finished, drained) = {
            let mut core = lock(&self.core);
            (core.done(&key, now), core.is_idle_after_shutdown())
        };
        let finished = finished.expect("in flight");
        if finished.requeued || finished.earliest_timer {
            self.ready.notify_one();
        }
        if drained {
            self.drained.notify_waiters();
        }
    }

    /// `shutdown`.
    fn shutdown(&self) {
        {
            let mut core = lock(&self.core);
            core.cut_drains();
            core.shut_down();
        }
        self.closed.store(true, Ordering::Release);
        self.ready.notify_waiters();
        self.drained.notify_waiters();
    }

    /// `shutdown_with_drain`.
    fn shutdown_with_drain(&self) {
        let epoch = {
            let mut core = lock(&self.core);
            core.shut_down();
            core.drain_epoch()
        };
        self.closed.store(true, Ordering::Release);
        self.ready.notify_waiters();
        loop {
            let mut notified = self.drained.notified();
            notified.enable();
            if lock(&self.core).is_drained(epoch) {
                return;
            }
            notified.wait(None);
        }
    }

    /// `is_closed`.
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes `count` ready keys under one lock, as a run does.
    fn take_run(&self, count: usize) -> VecDeque<Handed<u8, ()>> {
        let mut core = lock(&self.core);
        let now = self.ready.now();
        (0..count)
            .map(|_| match core.next(now) {
                Next::Key { handed, .. } => handed,
                other => panic!("expected a key, got {other:?}"),
            })
            .collect()
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
        queue.ready.advance_to(Stamp::default().after(first));
        queue.ready.advance_to(Stamp::default().after(second));
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
        assert!(matches!(queue.take_next(false), Taken::Key(1)));
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
        assert!(matches!(queue.take_next(false), Taken::Key(1)));
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
        let mut run = queue.take_run(2);
        // The worker's loop over a run: no new key starts once closed; the
        // rest is handed back, and dropped by the shut-down core.
        let worker = spawn(&queue, move |queue| {
            while let Some(handed) = run.pop_front() {
                if queue.is_closed() {
                    let mut core = lock(&queue.core);
                    for handed in std::iter::once(handed).chain(run.drain(..)) {
                        assert_eq!(core.restore(handed), Restored::Dropped);
                    }
                    return;
                }
                queue.done(handed.key);
            }
        });
        queue.shutdown();
        worker.join().expect("worker");
        assert_eq!(lock(&queue.core).in_flight_len(), 0);
    });
}
