//! A key's packed state in the queue core: ready, scheduled, in flight,
//! dirty, and the transitions of one slot that need no other part of the
//! core.

use super::Priority;
use super::payload::{Payload, merged};
use super::stamp::Stamp;

/// A key's state, packed: the map holds one per key, so its size is the
/// queue's memory per key and what a lookup pulls into cache. Ready,
/// scheduled and dirty exclude one another, so they share `at`, `seq`,
/// `priority` and `payload`; in flight goes with none, a timer, or dirty.
/// `DEBOUNCED` qualifies a timer or dirty state set by debounced adds only;
/// a debounced timer is never in flight (an add in flight marks dirty), so
/// it keeps its limit in `started`; a ready key (never in flight) keeps its
/// group there.
#[derive(Clone, Copy, Default)]
pub(super) struct Slot<T> {
    /// Ready: since when; scheduled: the deadline; dirty: the first add.
    pub(super) at: Stamp,
    /// The live ready or timer entry's sequence number.
    pub(super) seq: u64,
    /// In flight: since when; a debounced timer: the latest its deadline
    /// may be pushed back to; ready: the group its entry is filed under.
    pub(super) started: Stamp,
    pub(super) state: u8,
    pub(super) priority: Priority,
    pub(super) payload: T,
}

pub(super) const READY: u8 = 1;
pub(super) const SCHEDULED: u8 = 2;
pub(super) const IN_FLIGHT: u8 = 4;
pub(super) const DIRTY: u8 = 8;
pub(super) const DEBOUNCED: u8 = 16;

impl<T: Payload> Slot<T> {
    pub(super) fn is_empty(&self) -> bool {
        self.state == 0
    }

    pub(super) fn has(&self, state: u8) -> bool {
        self.state & state != 0
    }

    /// Sets the shared fields for `state` (one of the exclusive three).
    pub(super) fn set(&mut self, state: u8, at: Stamp, seq: u64, priority: Priority, payload: T) {
        debug_assert!(!self.has((READY | SCHEDULED | DIRTY) & !state));
        self.state |= state;
        (self.at, self.seq, self.priority, self.payload) = (at, seq, priority, payload);
    }

    pub(super) fn queued(&self) -> Option<Queued<T>> {
        self.has(READY).then_some(Queued {
            seq: self.seq,
            priority: self.priority,
            since: self.at,
            payload: self.payload,
            group: self.started.0,
        })
    }

    pub(super) fn set_queued(&mut self, q: Queued<T>) {
        debug_assert!(!self.has(IN_FLIGHT), "a ready key is never in flight");
        self.set(READY, q.since, q.seq, q.priority, q.payload);
        // `started` is unused while ready: it keeps the group.
        self.started = Stamp(q.group);
    }

    pub(super) fn take_queued(&mut self) -> Option<Queued<T>> {
        let queued = self.queued();
        self.state &= !READY;
        queued
    }

    pub(super) fn timer(&self) -> Option<Timer<T>> {
        self.has(SCHEDULED).then_some(Timer {
            seq: self.seq,
            deadline: self.at,
            priority: self.priority,
            payload: self.payload,
            limit: self.has(DEBOUNCED).then_some(self.started),
        })
    }

    pub(super) fn set_timer(&mut self, t: Timer<T>) {
        self.set(SCHEDULED, t.deadline, t.seq, t.priority, t.payload);
        if let Some(limit) = t.limit {
            debug_assert!(!self.has(IN_FLIGHT), "a debounced timer is never in flight");
            self.state |= DEBOUNCED;
            self.started = limit;
        }
    }

    pub(super) fn take_timer(&mut self) -> Option<Timer<T>> {
        let timer = self.timer();
        if timer.is_some() {
            self.state &= !(SCHEDULED | DEBOUNCED);
        }
        timer
    }

    /// When its processing started, if the key is in flight.
    pub(super) fn started(&self) -> Option<Stamp> {
        self.has(IN_FLIGHT).then_some(self.started)
    }

    pub(super) fn start(&mut self, now: Stamp) {
        self.state |= IN_FLIGHT;
        self.started = now;
    }

    pub(super) fn dirty(&self) -> Option<Dirty<T>> {
        self.has(DIRTY).then_some(Dirty {
            priority: self.priority,
            since: self.at,
            payload: self.payload,
            debounced: self.has(DEBOUNCED),
        })
    }

    pub(super) fn take_dirty(&mut self) -> Option<Dirty<T>> {
        let dirty = self.dirty();
        if dirty.is_some() {
            self.state &= !(DIRTY | DEBOUNCED);
        }
        dirty
    }

    /// Marks an in-flight key dirty (first add at `now`), or adds to its
    /// dirty state; it stays debounced only while every add was.
    pub(super) fn mark_dirty(
        &mut self,
        priority: Priority,
        now: Stamp,
        payload: T,
        debounced: bool,
    ) {
        match self.dirty() {
            Some(dirty) => {
                self.priority = dirty.priority.max(priority);
                self.payload.merge(payload);
                if !debounced {
                    self.state &= !DEBOUNCED;
                }
            }
            None => {
                self.set(DIRTY, now, 0, priority, payload);
                if debounced {
                    self.state |= DEBOUNCED;
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct Queued<T> {
    pub(super) seq: u64,
    pub(super) priority: Priority,
    pub(super) since: Stamp,
    pub(super) payload: T,
    /// The group the key's entry was filed under (0 without groups): a
    /// group function that answers differently later still finds it.
    pub(super) group: u64,
}

#[derive(Clone, Copy)]
pub(super) struct Timer<T> {
    pub(super) seq: u64,
    pub(super) deadline: Stamp,
    pub(super) priority: Priority,
    pub(super) payload: T,
    /// Set by debounced adds: the latest the deadline may move to.
    pub(super) limit: Option<Stamp>,
}

impl<T: Payload> Timer<T> {
    /// `payload` merged with what of this timer's outlives it when something
    /// replaces it: a debounced timer's payload records changes that
    /// happened; a plain timer's counts only if it fires.
    pub(super) fn merge_kept(&self, payload: T) -> T {
        if self.limit.is_some() {
            merged(payload, self.payload)
        } else {
            payload
        }
    }
}

/// What an in-flight key is queued again with when its worker is done.
#[derive(Clone, Copy)]
pub(super) struct Dirty<T> {
    pub(super) priority: Priority,
    /// The first add during processing.
    pub(super) since: Stamp,
    pub(super) payload: T,
    /// Only debounced adds made it dirty: debounced again at `done`.
    pub(super) debounced: bool,
}

/// A key's slot size with payload `T`: the queue's memory per key, checked
/// at compile time for the payloads the crate uses (the README's bytes per
/// object count on it).
pub(crate) const fn slot_size<T>() -> usize {
    std::mem::size_of::<Slot<T>>()
}

const _: () = assert!(slot_size::<()>() == 32, "a slot without payload grew");
