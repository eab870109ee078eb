//! Where keys wait in the queue core: the ready levels and the timer heap,
//! with the counts that go with them, and one function per slot transition
//! that touches them (make ready, cancel a timer, schedule or push back a
//! debounced timer, fire, start, end).
//!
//! Entries may go stale (a key moved to another level, a timer superseded):
//! an entry is live iff its `seq` equals the one in the key's slot; stale
//! entries are counted so the core can compact them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

use super::Priority;
use super::levels::{GroupFn, Levels, ReadyEntry};
use super::payload::Payload;
use super::shrink;
use super::slot::{IN_FLIGHT, Queued, Slot, Timer};
use super::stamp::Stamp;

/// Where a key made ready goes in its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Last: a fresh add.
    Back,
    /// First: a key handed back unstarted, keeping its place.
    Front,
}

pub(super) struct Lanes<K> {
    pub(super) levels: Levels<K>,
    pub(super) timers: BinaryHeap<TimerEntry<K>>,
    next_seq: u64,
    pub(super) ready: usize,
    pub(super) scheduled: usize,
    pub(super) in_flight: usize,
    pub(super) stale_ready: usize,
    pub(super) stale_timers: usize,
}

impl<K: Clone> Lanes<K> {
    pub(super) fn new(group: Option<GroupFn<K>>) -> Self {
        Self {
            levels: Levels::new(group),
            timers: BinaryHeap::new(),
            next_seq: 0,
            ready: 0,
            scheduled: 0,
            in_flight: 0,
            stale_ready: 0,
            stale_timers: 0,
        }
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Makes `key` ready at `priority`, ready since `since`, with `payload`.
    /// A key already ready moves to its new level (its old entry goes stale).
    pub(super) fn make_ready<T: Payload>(
        &mut self,
        slot: &mut Slot<T>,
        key: K,
        ready: Ready<T>,
        place: Place,
    ) {
        let seq = self.seq();
        let group = self.levels.group_of(&key);
        if let Some(old) = slot.take_queued() {
            self.stale_ready += 1;
            self.stale_ready -= self.levels.mark_stale(old.priority, old.group);
        } else {
            self.ready += 1;
        }
        let Ready {
            priority,
            since,
            payload,
        } = ready;
        slot.set_queued(Queued {
            seq,
            priority,
            since,
            payload,
            group,
        });
        let entry = ReadyEntry { seq, since, key };
        match place {
            Place::Back => self.levels.push(priority, group, entry),
            Place::Front => self.levels.push_front(priority, group, entry),
        }
    }

    /// Cancels `slot`'s timer, if it has one (being ready or dirty is
    /// sooner), and returns it.
    pub(super) fn cancel_timer<T: Payload>(&mut self, slot: &mut Slot<T>) -> Option<Timer<T>> {
        let timer = slot.take_timer()?;
        self.scheduled -= 1;
        self.stale_timers += 1;
        Some(timer)
    }

    /// Sets `slot`'s timer at `deadline` (replacing another, whose priority
    /// it keeps if higher, and its payload if it was debounced); `limit` makes
    /// it a debounced timer, which later debounced adds may push back up to
    /// `limit`. Returns whether it is now the earliest.
    pub(super) fn schedule<T: Payload>(
        &mut self,
        slot: &mut Slot<T>,
        key: K,
        deadline: Stamp,
        ready: Ready<T>,
        limit: Option<Stamp>,
    ) -> bool {
        let (priority, payload) = match self.cancel_timer(slot) {
            Some(old) => (
                old.priority.max(ready.priority),
                old.merge_kept(ready.payload),
            ),
            None => (ready.priority, ready.payload),
        };
        self.scheduled += 1;
        let seq = self.seq();
        slot.set_timer(Timer {
            seq,
            deadline,
            priority,
            payload,
            limit,
        });
        let earliest = self.timers.peek().is_none_or(|top| deadline < top.deadline);
        self.timers.push(TimerEntry { deadline, seq, key });
        earliest
    }

    /// Pops the earliest timer entry if it is due at `now` (live or stale).
    pub(super) fn pop_due(&mut self, now: Stamp) -> Option<TimerEntry<K>> {
        let top = self.timers.peek_mut()?;
        if top.deadline > now {
            return None;
        }
        Some(PeekMut::pop(top))
    }

    /// `slot`'s timer fired (its entry popped): the timer is gone.
    pub(super) fn fire<T: Payload>(&mut self, slot: &mut Slot<T>) -> Option<Timer<T>> {
        let timer = slot.take_timer()?;
        self.scheduled -= 1;
        Some(timer)
    }

    /// A ready key (its entry popped) goes to a worker at `now`.
    pub(super) fn start<T: Payload>(
        &mut self,
        slot: &mut Slot<T>,
        now: Stamp,
    ) -> Option<Queued<T>> {
        let queued = slot.take_queued()?;
        slot.start(now);
        self.ready -= 1;
        self.in_flight += 1;
        Some(queued)
    }

    /// An in-flight key's worker is done with it (or handed it back).
    pub(super) fn end<T>(&mut self, slot: &mut Slot<T>) {
        slot.state &= !IN_FLIGHT;
        self.in_flight -= 1;
    }

    /// The timer heap's memory back after a burst (see `shrink`).
    pub(super) fn shrink_timers_if_sparse(&mut self) {
        if shrink::is_sparse(self.timers.len(), self.timers.capacity()) {
            self.timers.shrink_to(shrink::target(self.timers.len()));
        }
    }

    /// Forgets every entry (shutdown); returns how many keys were ready and
    /// scheduled.
    pub(super) fn clear(&mut self) -> (usize, usize) {
        let pending = (self.ready, self.scheduled);
        self.levels.clear();
        self.timers.clear();
        (
            self.ready,
            self.scheduled,
            self.stale_ready,
            self.stale_timers,
        ) = (0, 0, 0, 0);
        pending
    }
}

/// What a key is made ready (or scheduled) with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ready<T> {
    pub(super) priority: Priority,
    pub(super) since: Stamp,
    pub(super) payload: T,
}

pub(super) struct TimerEntry<K> {
    pub(super) deadline: Stamp,
    pub(super) seq: u64,
    pub(super) key: K,
}

// Reversed so that `BinaryHeap` (a max-heap) pops the earliest deadline first.
impl<K> Ord for TimerEntry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}
impl<K> PartialOrd for TimerEntry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> PartialEq for TimerEntry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl<K> Eq for TimerEntry<K> {}
