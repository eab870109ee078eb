//! The queue's wake-up protocol, as synchronous steps of the core.
//!
//! Every operation of the shell (`mod.rs`, `batch.rs`) takes the core's
//! lock, runs one step, releases the lock and then does what the step
//! returned: a [`Wake`] (how many workers to wake, whether to flag the queue
//! closed and wake everyone, whether to wake the drains) and, for a
//! worker's look, a [`Look`] (a key, or how long to sleep). Nothing here
//! reads a clock or knows tokio: the shell does a `Wake` on tokio's
//! `Notify`, the loom models (`loom_wakeups.rs`) on a model of its
//! documented contract, both through [`Ring`] and [`Signals::wake`], so loom
//! checks the decisions the shell runs.
//!
//! # The protocol
//!
//! - A worker that finds nothing registers for a wake-up, then looks again
//!   ([`Core::look_registered`]) before it sleeps: a key made ready between
//!   the two looks still wakes it.
//! - Every key made ready wakes one worker, less those the caller takes
//!   itself; a timer set ahead of every other wakes one (a worker sleeping
//!   until a later deadline must look again).
//! - One sleeping worker at a time is counted as watching the timers (while
//!   it holds a [`Watching`]); a worker that takes a key while timers are
//!   pending and nobody watches them wakes another to take the watch over.
//! - Shutdown flags the queue closed, then wakes every worker; the end of
//!   the last key in flight after shutdown wakes every drain.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::core::{Added, Core, Finished, Handed, Next, NotInFlight, Scheduled};
use super::stamp::Stamp;
use super::{Add, Payload, QueueKey};
use crate::sync::{AtomicBool, Mutex, lock};

/// Who to wake once the core's lock is released ([`Signals::wake`]).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake {
    /// Workers to wake, one each.
    pub(crate) workers: usize,
    /// The queue is shut down: flag it closed, then wake every worker.
    pub(crate) closed: bool,
    /// A drain may be over: wake every drain.
    pub(crate) drains: bool,
}

impl Wake {
    /// Nobody.
    pub(crate) const NONE: Self = Self {
        workers: 0,
        closed: false,
        drains: false,
    };

    /// `count` workers, one each.
    pub(crate) const fn workers(count: usize) -> Self {
        Self {
            workers: count,
            ..Self::NONE
        }
    }
}

/// The wake-ups the protocol needs: tokio's `Notify` in the shell, a model
/// of its documented contract under loom.
pub(crate) trait Ring {
    /// Wakes the oldest registered waiter, or keeps one wake-up for the next
    /// waiter to register.
    fn notify_one(&self);

    /// Wakes every registered waiter; keeps nothing.
    fn notify_waiters(&self);
}

/// The shell's wake-ups: workers wait on `ready`, drains on `drained`, and
/// workers holding a run read `closed` without the lock.
#[derive(Debug)]
pub(crate) struct Signals<R> {
    pub(crate) ready: R,
    pub(crate) drained: R,
    closed: AtomicBool,
}

impl<R: Ring> Signals<R> {
    pub(crate) fn new(ready: R, drained: R) -> Self {
        Self {
            ready,
            drained,
            closed: AtomicBool::new(false),
        }
    }

    /// Does what a step returned. Call it after the core's lock is released:
    /// a woken worker's first act is to take that lock.
    pub(crate) fn wake(&self, wake: Wake) {
        if wake.closed {
            // Set after the shutdown's lock: a worker that reads it finds
            // the core shut down.
            self.closed.store(true, Ordering::Release);
            self.ready.notify_waiters();
        }
        for _ in 0..wake.workers {
            self.ready.notify_one();
        }
        if wake.drains {
            self.drained.notify_waiters();
        }
    }

    /// Whether the queue is shut down, without the lock (possibly a moment
    /// late: for workers deciding whether to start another key).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// What a worker's look found ([`Core::look`], [`Core::look_registered`]).
#[derive(Debug)]
pub(crate) enum Look<K, T> {
    /// A key for the caller, how long it waited, how many timers fired
    /// (each an add), and who else to wake.
    Took {
        handed: Handed<K, T>,
        waited: Duration,
        fired: usize,
        wake: Wake,
    },
    /// Nothing ready: sleep until woken or, with `until`, until the earliest
    /// timer. `fired`: timers that fired for keys in flight (each an add).
    Sleep { until: Option<Stamp>, fired: usize },
    /// Shut down: no more keys.
    Closed,
}

/// What a run of adds did ([`Core::add_many`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AddedMany {
    /// Keys made ready or marked dirty: each an add.
    pub(crate) added: usize,
    pub(crate) wake: Wake,
}

/// What ending a key did ([`Core::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// How long it was in flight.
    pub(crate) worked: Duration,
    pub(crate) wake: Wake,
}

/// What a shutdown did ([`Core::shut`], [`Core::shut_to_drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shut {
    /// Ready, scheduled and dirty keys dropped.
    pub(crate) dropped: u64,
    pub(crate) wake: Wake,
}

impl Added {
    /// Who an immediate add wakes: a worker for a key made ready.
    pub(crate) fn wake(self) -> Wake {
        match self {
            Added::Queued => Wake::workers(1),
            Added::Dirty | Added::Deduplicated | Added::Rejected => Wake::NONE,
        }
    }
}

impl Scheduled {
    /// Who a delayed add wakes: as an immediate add for a zero delay, and a
    /// worker for a timer ahead of every other.
    pub(crate) fn wake(self) -> Wake {
        match self {
            Scheduled::Now(added) => added.wake(),
            Scheduled::Timer { earliest: true } => Wake::workers(1),
            Scheduled::Timer { earliest: false }
            | Scheduled::Deduplicated
            | Scheduled::Rejected => Wake::NONE,
        }
    }
}

impl Finished {
    /// Workers a key's end wakes: one if it was queued again, or debounced
    /// again ahead of every other timer.
    pub(crate) fn workers(self) -> usize {
        usize::from(self.requeued || self.earliest_timer)
    }
}

impl<K: QueueKey, T: Payload> Core<K, T> {
    /// Adds each key at once, or debounced (see [`Add`]), reading `now` at
    /// most once, and none if every add is a no-op.
    pub(crate) fn add_many(
        &mut self,
        keys: impl IntoIterator<Item = Add<K, T>>,
        mut now: impl FnMut() -> Stamp,
    ) -> AddedMany {
        let (mut queued, mut dirty, mut earliest) = (0usize, 0usize, false);
        let mut read = None;
        let mut clock = || *read.get_or_insert_with(&mut now);
        for Add {
            key,
            priority,
            payload,
            debounced,
        } in keys
        {
            let added = if debounced {
                match self.debounce(key, priority, payload, &mut clock) {
                    Scheduled::Now(added) => added,
                    Scheduled::Timer { earliest: first } => {
                        earliest |= first;
                        continue;
                    }
                    Scheduled::Deduplicated | Scheduled::Rejected => continue,
                }
            } else {
                self.add(key, priority, payload, &mut clock)
            };
            match added {
                Added::Queued => queued += 1,
                Added::Dirty => dirty += 1,
                Added::Deduplicated | Added::Rejected => {}
            }
        }
        AddedMany {
            added: queued + dirty,
            // One for any number of earliest timers: a sleeper looks once.
            wake: Wake::workers(queued + usize::from(earliest)),
        }
    }

    /// A worker's look before it registers for a wake-up; on
    /// [`Look::Sleep`] it registers and looks again with
    /// [`look_registered`](Self::look_registered).
    pub(crate) fn look(&mut self, now: Stamp) -> Look<K, T> {
        self.look_and_take(now, |_| {})
    }

    /// A look by a worker registered for a wake-up, that sleeps on
    /// [`Look::Sleep`]: until a deadline, it is counted as watching the
    /// timers and must hold a [`Watching`] while it sleeps.
    pub(crate) fn look_registered(&mut self, now: Stamp) -> Look<K, T> {
        let look = self.look(now);
        if let Look::Sleep { until: Some(_), .. } = look {
            self.watch_timers();
        }
        look
    }

    /// [`look`](Self::look); when it takes a key, `more` may take more
    /// before the wake-ups are counted, so that keys the caller took wake
    /// nobody.
    pub(crate) fn look_and_take(&mut self, now: Stamp, more: impl FnOnce(&mut Self)) -> Look<K, T> {
        match self.next(now) {
            Next::Key {
                handed,
                waited,
                fired,
            } => {
                // If the caller was the one watching the timers, another
                // must take the watch over.
                let unwatched = self.timers_unwatched();
                more(self);
                // Timers made more keys ready than the caller's: a worker each.
                let others = fired.min(self.ready_len());
                Look::Took {
                    handed,
                    waited,
                    fired,
                    wake: Wake::workers(others + usize::from(unwatched)),
                }
            }
            Next::Empty { wake_at, fired } => Look::Sleep {
                until: wake_at,
                fired,
            },
            Next::ShutDown => Look::Closed,
        }
    }

    /// Ends `key`'s processing ([`done`](Self::done)); wakes a worker for
    /// it (see [`Finished::workers`]), and every drain if it was the last
    /// key in flight after shutdown.
    pub(crate) fn end(&mut self, key: &K, now: Stamp) -> Result<Ended, NotInFlight> {
        let finished = self.done(key, now)?;
        Ok(Ended {
            worked: finished.worked,
            wake: Wake {
                drains: self.is_idle_after_shutdown(),
                ..Wake::workers(finished.workers())
            },
        })
    }

    /// Shuts down (if not already) and cuts every drain in progress short;
    /// wakes everyone.
    pub(crate) fn shut(&mut self) -> Shut {
        self.cut_drains();
        Shut {
            dropped: self.shut_down(),
            wake: Wake {
                closed: true,
                drains: true,
                ..Wake::NONE
            },
        }
    }

    /// Shuts down (if not already) without cutting any drain short, this
    /// one's included; wakes every worker. Also returns the epoch the drain
    /// waits under ([`is_drained`](Self::is_drained)).
    pub(crate) fn shut_to_drain(&mut self) -> (Shut, u64) {
        let shut = Shut {
            dropped: self.shut_down(),
            wake: Wake {
                closed: true,
                ..Wake::NONE
            },
        };
        (shut, self.drain_epoch())
    }
}

/// Counts a worker as watching the timers (see [`Core::look_registered`])
/// until dropped, however its sleep ends.
pub(crate) struct Watching<'a, K: QueueKey, T: Payload>(&'a Mutex<Core<K, T>>);

impl<'a, K: QueueKey, T: Payload> Watching<'a, K, T> {
    /// For a worker that `core`'s look counted as watching.
    pub(crate) fn new(core: &'a Mutex<Core<K, T>>) -> Self {
        Self(core)
    }
}

impl<K: QueueKey, T: Payload> Drop for Watching<'_, K, T> {
    fn drop(&mut self) {
        lock(self.0).unwatch_timers();
    }
}
