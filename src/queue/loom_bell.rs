//! A model of tokio's `Notify` for the loom models of the wake-up protocol
//! (`loom_wakeups.rs`), with a clock for the sleeps until a deadline.
//!
//! The shell (`mod.rs`) sleeps on tokio's `Notify` and `sleep_until`, which
//! loom cannot run: loom explores only its own primitives, and tokio's own
//! loom build needs a global `--cfg loom`, which also removes the
//! `tokio::signal` the manager needs. So [`Bell`] stands in for `Notify` as
//! its documentation specifies it, and nothing more:
//!
//! - a `notify_one` wakes the oldest registered waiter, or stores one permit
//!   when none is registered;
//! - `notify_waiters` wakes every registered waiter and every `Notified`
//!   created before the call, and stores nothing;
//! - a waiter chosen by `notify_one` and dropped before it took the wake-up
//!   passes it on (to the next waiter, or as the permit).
//!
//! Time is the bell's clock, moved by a model's main thread. A sleep until a
//! deadline is a wait on the bell that also ends once the clock reaches the
//! deadline, as tokio's timer then wakes the task.

use std::collections::VecDeque;
use std::sync::PoisonError;

use loom::sync::Condvar;

use super::stamp::Stamp;
use super::wake::Ring;
use crate::sync::{Mutex, MutexGuard, lock};

/// tokio's `Notify`, as specified (see the module docs), plus the clock.
#[derive(Default)]
pub(super) struct Bell {
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
    pub(super) fn notified(&self) -> Notified<'_> {
        let mut rings = self.lock();
        rings.next_id += 1;
        Notified {
            bell: self,
            id: rings.next_id,
            broadcasts: rings.broadcasts,
            state: State::Init,
        }
    }

    pub(super) fn now(&self) -> Stamp {
        Stamp(self.lock().now)
    }

    /// Moves the clock to `at`; sleepers until then wake.
    pub(super) fn advance_to(&self, at: Stamp) {
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
pub(super) struct Notified<'a> {
    bell: &'a Bell,
    id: usize,
    /// `notify_waiters` calls when it was created.
    broadcasts: usize,
    state: State,
}

impl Notified<'_> {
    /// `Notified::enable`: takes the permit or a broadcast since creation,
    /// or registers as a waiter.
    pub(super) fn enable(&mut self) {
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
    pub(super) fn wait(&mut self, deadline: Option<Stamp>) {
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

impl Ring for Bell {
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
}
