//! The queue's synchronous core: plain data, no tokio, no lock of its own.
//!
//! The async shell (`WorkQueue`) owns one `Core` behind a mutex and passes the
//! current time into every call, so this file runs the same under loom,
//! proptest and normal builds.
//!
//! # Invariants
//!
//! - A key has a `Slot` iff it is ready (`queued`), scheduled (`timer`) or
//!   held by a worker (`flight`). Ready and scheduled never go together:
//!   queueing a key cancels its timer, and scheduling a ready key is a no-op
//!   (it is already due sooner).
//! - A key in flight is never ready; an add marks it dirty instead, and
//!   `done` queues it again. One map for all three keeps every operation to
//!   one hash lookup (two when a slot empties).
//! - Each pending state carries `Marks`: opaque bits merged by every add
//!   that lands on it and handed out with the key (the controller's "why did
//!   this run"). A timer's marks count only if it fires: an add that makes
//!   the key ready sooner cancels the timer and its marks with it.
//! - `levels` and `timers` may hold stale entries (a key re-prioritised, a
//!   timer superseded); an entry is live iff its `seq` equals the one in the
//!   key's slot. Stale entries are counted and compacted when they outnumber
//!   live ones, so memory stays bounded by live keys.

use std::cmp::Ordering;
use std::collections::binary_heap::PeekMut;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use foldhash::fast::RandomState;

use super::levels::{Levels, ReadyEntry};
use super::shrink;
use super::stamp::Stamp;
use super::{Priority, QueueKey};

/// Bits an add attaches to its key, OR-ed together until the key is handed
/// out (see the module docs).
pub(crate) type Marks = u8;

/// Stale entries tolerated before a compaction is considered.
const COMPACT_FLOOR: usize = 64;

pub(crate) struct Core<K> {
    slots: HashMap<K, Slot, RandomState>,
    levels: Levels<K>,
    timers: BinaryHeap<TimerEntry<K>>,
    next_seq: u64,
    ready: usize,
    scheduled: usize,
    in_flight: usize,
    stale_ready: usize,
    stale_timers: usize,
    max_wait: Duration,
    aged_turn: bool,
    shut_down: bool,
    /// Bumped by every explicit shutdown: a drain that began at another
    /// value was cut short.
    drain_cuts: u64,
    /// Workers sleeping until the earliest timer; when none is, a worker
    /// that takes a key must wake another to watch the timers.
    timer_watchers: usize,
    dropped: u64,
}

/// A key's state, packed: the map holds one per key, so its size is the
/// queue's memory per key and what a lookup pulls into cache. Ready,
/// scheduled and dirty exclude one another, so they share `at`, `seq`,
/// `priority` and `marks`; in flight goes with none, a timer, or dirty.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Ready: since when; scheduled: the deadline; dirty: the first add.
    at: Stamp,
    /// The live ready or timer entry's sequence number.
    seq: u64,
    /// In flight: since when.
    started: Stamp,
    state: u8,
    priority: Priority,
    marks: Marks,
}

const READY: u8 = 1;
const SCHEDULED: u8 = 2;
const IN_FLIGHT: u8 = 4;
const DIRTY: u8 = 8;

impl Slot {
    fn is_empty(&self) -> bool {
        self.state == 0
    }

    fn has(&self, state: u8) -> bool {
        self.state & state != 0
    }

    /// Sets the shared fields for `state` (one of the exclusive three).
    fn set(&mut self, state: u8, at: Stamp, seq: u64, priority: Priority, marks: Marks) {
        debug_assert!(!self.has((READY | SCHEDULED | DIRTY) & !state));
        self.state |= state;
        (self.at, self.seq, self.priority, self.marks) = (at, seq, priority, marks);
    }

    fn queued(&self) -> Option<Queued> {
        self.has(READY).then_some(Queued {
            seq: self.seq,
            priority: self.priority,
            since: self.at,
            marks: self.marks,
        })
    }

    fn set_queued(&mut self, q: Queued) {
        self.set(READY, q.since, q.seq, q.priority, q.marks);
    }

    fn take_queued(&mut self) -> Option<Queued> {
        let queued = self.queued();
        self.state &= !READY;
        queued
    }

    fn timer(&self) -> Option<Timer> {
        self.has(SCHEDULED).then_some(Timer {
            seq: self.seq,
            deadline: self.at,
            priority: self.priority,
            marks: self.marks,
        })
    }

    fn set_timer(&mut self, t: Timer) {
        self.set(SCHEDULED, t.deadline, t.seq, t.priority, t.marks);
    }

    fn take_timer(&mut self) -> Option<Timer> {
        let timer = self.timer();
        self.state &= !SCHEDULED;
        timer
    }

    /// When its processing started, if the key is in flight.
    fn started(&self) -> Option<Stamp> {
        self.has(IN_FLIGHT).then_some(self.started)
    }

    fn start(&mut self, now: Stamp) {
        self.state |= IN_FLIGHT;
        self.started = now;
    }

    fn dirty(&self) -> Option<Dirty> {
        self.has(DIRTY).then_some(Dirty {
            priority: self.priority,
            since: self.at,
            marks: self.marks,
        })
    }

    fn take_dirty(&mut self) -> Option<Dirty> {
        let dirty = self.dirty();
        self.state &= !DIRTY;
        dirty
    }

    /// Marks an in-flight key dirty (first add at `now`), or adds to its
    /// dirty state.
    fn mark_dirty(&mut self, priority: Priority, now: Stamp, marks: Marks) {
        match self.dirty() {
            Some(dirty) => {
                self.priority = dirty.priority.max(priority);
                self.marks |= marks;
            }
            None => self.set(DIRTY, now, 0, priority, marks),
        }
    }
}

#[derive(Clone, Copy)]
struct Queued {
    seq: u64,
    priority: Priority,
    since: Stamp,
    marks: Marks,
}

#[derive(Clone, Copy)]
struct Timer {
    seq: u64,
    deadline: Stamp,
    priority: Priority,
    marks: Marks,
}

/// What an in-flight key is queued again with when its worker is done.
#[derive(Clone, Copy)]
struct Dirty {
    priority: Priority,
    /// The first add during processing.
    since: Stamp,
    marks: Marks,
}

struct TimerEntry<K> {
    deadline: Stamp,
    seq: u64,
    key: K,
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

/// What an immediate add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// The key became ready: wake a worker.
    Queued,
    /// The key is being processed; it runs again after `done`.
    Dirty,
    /// The key was already ready (its priority may have been raised).
    Deduplicated,
    /// The queue is shut down; the key was dropped.
    Rejected,
}

/// What a delayed add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduled {
    /// The delay was zero: the add was immediate.
    Now(Added),
    /// A timer was set; `earliest` when no other timer fires sooner, so a
    /// sleeping worker must recompute its deadline.
    Timer { earliest: bool },
    /// The key was already due at that time or sooner.
    Deduplicated,
    /// The queue is shut down; the key was dropped.
    Rejected,
}

/// What `next` found for a worker.
#[derive(Debug)]
pub(crate) enum Next<K> {
    /// A key to process with its marks, how long it waited, and how many
    /// timers fired while looking (if more keys than this one became ready,
    /// another worker should be woken).
    Key {
        handed: Handed<K>,
        waited: Duration,
        fired: usize,
    },
    /// Nothing ready; the earliest timer, if any, and how many timers fired
    /// while looking (each for a key in flight, now marked dirty).
    Empty {
        wake_at: Option<Stamp>,
        fired: usize,
    },
    /// The queue is shut down.
    ShutDown,
}

/// A key handed to a worker, with what the queue needs to take it back
/// (`restore`): its priority and since when it was ready.
#[derive(Debug, Clone)]
pub(crate) struct Handed<K> {
    pub(crate) key: K,
    pub(crate) marks: Marks,
    pub(crate) priority: Priority,
    pub(crate) since: Stamp,
}

/// What `restore` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restored {
    /// The key is ready again.
    Ready,
    /// The queue is shut down: the key was dropped (and counted).
    Dropped,
    /// No worker held the key.
    NotInFlight,
}

/// The key passed to `done` was not being processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotInFlight;

/// What `done` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) worked: Duration,
    pub(crate) requeued: bool,
}

impl<K: QueueKey> Core<K> {
    pub(crate) fn new(max_wait: Duration) -> Self {
        Self {
            slots: HashMap::default(),
            levels: Levels::new(),
            timers: BinaryHeap::new(),
            next_seq: 0,
            ready: 0,
            scheduled: 0,
            in_flight: 0,
            stale_ready: 0,
            stale_timers: 0,
            max_wait,
            aged_turn: false,
            shut_down: false,
            drain_cuts: 0,
            timer_watchers: 0,
            dropped: 0,
        }
    }

    /// `now` is read only when the add is not a no-op, so that a storm of
    /// duplicate adds does not pay for the clock.
    pub(crate) fn add(
        &mut self,
        key: K,
        mut priority: Priority,
        marks: Marks,
        now: impl FnOnce() -> Stamp,
    ) -> Added {
        if self.shut_down {
            return Added::Rejected;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        match self.slots.entry(key) {
            Entry::Vacant(entry) => {
                let key = entry.key().clone();
                let now = now();
                let mut slot = Slot::default();
                slot.set_queued(Queued {
                    seq,
                    priority,
                    since: now,
                    marks,
                });
                entry.insert(slot);
                self.ready += 1;
                push_ready(&mut self.levels, priority, seq, now, key);
                Added::Queued
            }
            Entry::Occupied(mut entry) => {
                let slot = entry.get_mut();
                if slot.has(IN_FLIGHT) {
                    if slot.has(DIRTY) {
                        slot.mark_dirty(priority, Stamp::default(), marks);
                        return Added::Deduplicated;
                    }
                    // Running again right after `done` is sooner than any
                    // timer (taken first: a timer and dirty share fields),
                    // at the higher of the two priorities.
                    if let Some(timer) = slot.take_timer() {
                        self.scheduled -= 1;
                        self.stale_timers += 1;
                        priority = priority.max(timer.priority);
                    }
                    slot.mark_dirty(priority, now(), marks);
                    return Added::Dirty;
                }
                let (since, marks, added) = match slot.queued() {
                    Some(queued) if queued.priority >= priority => {
                        slot.marks |= marks;
                        return Added::Deduplicated;
                    }
                    // Raised priority: move to the new level, keeping its age.
                    Some(queued) => {
                        self.stale_ready += 1;
                        (queued.since, queued.marks | marks, Added::Deduplicated)
                    }
                    None => {
                        // Only a timer: ready now is sooner, at the higher
                        // of the two priorities.
                        if let Some(timer) = slot.take_timer() {
                            priority = priority.max(timer.priority);
                        }
                        self.scheduled -= 1;
                        self.stale_timers += 1;
                        self.ready += 1;
                        (now(), marks, Added::Queued)
                    }
                };
                slot.set_queued(Queued {
                    seq,
                    priority,
                    since,
                    marks,
                });
                let key = entry.key().clone();
                push_ready(&mut self.levels, priority, seq, since, key);
                self.compact_if_needed();
                added
            }
        }
    }

    /// Schedules `key` at `deadline` to become ready at `priority`, with
    /// `marks`, which count only if this timer is the one that makes the key
    /// ready. A timer already due sooner stays, at the higher priority.
    pub(crate) fn add_after(
        &mut self,
        key: K,
        deadline: Stamp,
        priority: Priority,
        marks: Marks,
        now: Stamp,
    ) -> Scheduled {
        if self.shut_down {
            return Scheduled::Rejected;
        }
        if deadline <= now {
            return Scheduled::Now(self.add(key, priority, marks, || now));
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        let (key, slot) = match self.slots.entry(key) {
            Entry::Occupied(entry) => (entry.key().clone(), entry.into_mut()),
            Entry::Vacant(entry) => (entry.key().clone(), entry.insert(Slot::default())),
        };
        if slot.has(READY | DIRTY) {
            return Scheduled::Deduplicated;
        }
        let priority = match slot.timer() {
            Some(timer) if timer.deadline <= deadline => {
                slot.priority = timer.priority.max(priority);
                return Scheduled::Deduplicated;
            }
            Some(timer) => {
                self.stale_timers += 1;
                timer.priority.max(priority)
            }
            None => {
                self.scheduled += 1;
                priority
            }
        };
        slot.set_timer(Timer {
            seq,
            deadline,
            priority,
            marks,
        });
        let earliest = self.timers.peek().is_none_or(|top| deadline < top.deadline);
        self.timers.push(TimerEntry { deadline, seq, key });
        self.compact_if_needed();
        Scheduled::Timer { earliest }
    }

    /// If `key` will be handed out without another add (ready, scheduled, or
    /// dirty while processing), adds `marks` to that pending state and
    /// returns true.
    pub(crate) fn mark_pending(&mut self, key: &K, marks: Marks) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        if !slot.has(READY | SCHEDULED | DIRTY) {
            return false;
        }
        // The marks of whichever of the three the key is in.
        slot.marks |= marks;
        true
    }

    pub(crate) fn next(&mut self, now: Stamp) -> Next<K> {
        if self.shut_down {
            return Next::ShutDown;
        }
        let fired = self.fire_timers(now);
        let Some((key, queued)) = self.pop_ready(now) else {
            return Next::Empty {
                wake_at: self.timers.peek().map(|t| t.deadline),
                fired,
            };
        };
        Next::Key {
            handed: Handed {
                key,
                marks: queued.marks,
                priority: queued.priority,
                since: queued.since,
            },
            waited: now.saturating_duration_since(queued.since),
            fired,
        }
    }

    pub(crate) fn done(&mut self, key: &K, now: Stamp) -> Result<Finished, NotInFlight> {
        let slot = self.slots.get_mut(key).ok_or(NotInFlight)?;
        let started = slot.started().ok_or(NotInFlight)?;
        slot.state &= !IN_FLIGHT;
        self.in_flight -= 1;
        let worked = now.saturating_duration_since(started);
        let Some(dirty) = slot.take_dirty() else {
            if slot.is_empty() {
                self.slots.remove(key);
                self.shrink_slots_if_sparse();
            }
            return Ok(Finished {
                worked,
                requeued: false,
            });
        };
        // A dirty key is not queued (adds only marked it dirty) and has no
        // timer (marking it dirty cancelled that, and later timers dedup).
        self.next_seq += 1;
        let seq = self.next_seq;
        slot.set_queued(Queued {
            seq,
            priority: dirty.priority,
            since: dirty.since,
            marks: dirty.marks,
        });
        push_ready(
            &mut self.levels,
            dirty.priority,
            seq,
            dirty.since,
            key.clone(),
        );
        self.ready += 1;
        Ok(Finished {
            worked,
            requeued: true,
        })
    }

    /// Hands back a key taken but not started: ready again first in its
    /// level, with its priority, marks and age, as if never taken. What an
    /// add made dirty meanwhile is merged in, and a timer set meanwhile is
    /// cancelled (ready is sooner). After shutdown the key is dropped.
    pub(crate) fn restore(&mut self, handed: Handed<K>) -> Restored {
        let Handed {
            key,
            mut priority,
            mut marks,
            mut since,
        } = handed;
        let Some(slot) = self.slots.get_mut(&key) else {
            return Restored::NotInFlight;
        };
        if !slot.has(IN_FLIGHT) {
            return Restored::NotInFlight;
        }
        slot.state &= !IN_FLIGHT;
        self.in_flight -= 1;
        if self.shut_down {
            // Shutdown kept only the in-flight mark; nothing else is pending.
            self.slots.remove(&key);
            self.shrink_slots_if_sparse();
            self.dropped += 1;
            return Restored::Dropped;
        }
        if let Some(dirty) = slot.take_dirty() {
            priority = priority.max(dirty.priority);
            marks |= dirty.marks;
            since = since.min(dirty.since);
        }
        if let Some(timer) = slot.take_timer() {
            self.scheduled -= 1;
            self.stale_timers += 1;
            priority = priority.max(timer.priority);
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        slot.set_queued(Queued {
            seq,
            priority,
            since,
            marks,
        });
        self.levels
            .push_front(priority, ReadyEntry { seq, since, key });
        self.ready += 1;
        Restored::Ready
    }

    /// Stops the queue: drops every ready, scheduled and dirty key and returns
    /// how many were dropped. A second call abandons a pending drain.
    pub(crate) fn shut_down(&mut self) -> u64 {
        if self.shut_down {
            return 0;
        }
        self.shut_down = true;
        let mut dirty = 0;
        // Keep only the in-flight keys, without their dirty marks.
        self.slots.retain(|_, slot| {
            slot.take_queued();
            slot.take_timer();
            dirty += usize::from(slot.take_dirty().is_some());
            slot.has(IN_FLIGHT)
        });
        let dropped = (self.ready + self.scheduled + dirty) as u64;
        self.levels.clear();
        self.timers.clear();
        (
            self.ready,
            self.scheduled,
            self.stale_ready,
            self.stale_timers,
        ) = (0, 0, 0, 0);
        self.dropped += dropped;
        dropped
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Shut down with nothing in flight: every drain is over.
    pub(crate) fn is_idle_after_shutdown(&self) -> bool {
        self.shut_down && self.in_flight == 0
    }

    /// A drain is over when nothing is in flight, or a later shutdown cut it short.
    /// Cuts short every drain in progress (see `is_drained`).
    pub(crate) fn cut_drains(&mut self) {
        self.drain_cuts += 1;
    }

    /// The value a drain starting now waits under.
    pub(crate) fn drain_epoch(&self) -> u64 {
        self.drain_cuts
    }

    /// A drain begun at `epoch` is over when nothing is in flight, or a later
    /// explicit shutdown cut it short.
    pub(crate) fn is_drained(&self, epoch: u64) -> bool {
        self.in_flight == 0 || self.drain_cuts != epoch
    }

    /// A worker starts sleeping until the earliest timer.
    pub(crate) fn watch_timers(&mut self) {
        self.timer_watchers += 1;
    }

    /// A worker stopped sleeping until the earliest timer.
    pub(crate) fn unwatch_timers(&mut self) {
        self.timer_watchers = self.timer_watchers.saturating_sub(1);
    }

    /// Whether timers are pending with no worker sleeping until them.
    pub(crate) fn timers_unwatched(&self) -> bool {
        self.scheduled > 0 && self.timer_watchers == 0
    }

    pub(crate) fn ready_len(&self) -> usize {
        self.ready
    }

    pub(crate) fn scheduled_len(&self) -> usize {
        self.scheduled
    }

    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every in-flight key with the time its processing started (a scan of
    /// all keys: for scrapes and debugging, not hot paths).
    pub(crate) fn in_flight(&self) -> impl Iterator<Item = (&K, Stamp)> {
        self.slots
            .iter()
            .filter_map(|(k, s)| s.started().map(|started| (k, started)))
    }

    /// Heap entries, live or stale (for tests of compaction).
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    /// Memory held by the key map, the ready levels and the timer heap, in
    /// entries (for tests of shrinking).
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn capacities(&self) -> (usize, usize, usize) {
        (
            self.slots.capacity(),
            self.levels.capacity(),
            self.timers.capacity(),
        )
    }

    /// Ready entries, live or stale (for tests of compaction).
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn ready_entries(&self) -> usize {
        self.levels.entries()
    }

    /// Moves every due timer's key to ready (or marks it dirty when it is in
    /// flight); returns how many fired.
    fn fire_timers(&mut self, now: Stamp) -> usize {
        let mut fired = 0;
        while let Some(top) = self.timers.peek_mut() {
            if top.deadline > now {
                break;
            }
            let TimerEntry { deadline, seq, key } = PeekMut::pop(top);
            let Some(slot) = self.slots.get_mut(&key) else {
                self.stale_timers -= 1;
                continue;
            };
            let Some(timer) = slot.timer().filter(|t| t.seq == seq) else {
                self.stale_timers -= 1;
                continue;
            };
            slot.take_timer();
            self.scheduled -= 1;
            fired += 1;
            if slot.has(IN_FLIGHT) {
                slot.mark_dirty(timer.priority, deadline, timer.marks);
                continue;
            }
            self.next_seq += 1;
            let seq = self.next_seq;
            slot.set_queued(Queued {
                seq,
                priority: timer.priority,
                since: deadline,
                marks: timer.marks,
            });
            push_ready(&mut self.levels, timer.priority, seq, deadline, key);
            self.ready += 1;
        }
        if fired > 0 && shrink::is_sparse(self.timers.len(), self.timers.capacity()) {
            self.timers.shrink_to(shrink::target(self.timers.len()));
        }
        fired
    }

    /// Pops the next live ready key: the highest priority level's oldest key,
    /// except that on every other pop a key that has waited longer than
    /// `max_wait` in a lower level goes first, so low priorities never starve
    /// yet never take more than half the throughput from fresh changes. The
    /// key is marked in flight.
    fn pop_ready(&mut self, now: Stamp) -> Option<(K, Queued)> {
        loop {
            let (at, several_levels) = self.choose_level(now)?;
            let entry = self.levels.pop(at)?;
            let Some(slot) = self.slots.get_mut(&entry.key) else {
                self.stale_ready -= 1;
                continue;
            };
            match slot.queued() {
                Some(queued) if queued.seq == entry.seq => {
                    slot.take_queued();
                    slot.start(now);
                    self.ready -= 1;
                    self.in_flight += 1;
                    if several_levels {
                        self.aged_turn = !self.aged_turn;
                    }
                    return Some((entry.key, queued));
                }
                _ => self.stale_ready -= 1,
            }
        }
    }

    /// The level to pop from, and whether several levels had keys.
    fn choose_level(&mut self, now: Stamp) -> Option<(usize, bool)> {
        {
            let mut fronts = self.levels.fronts();
            let (highest, _) = fronts.next()?;
            if fronts.next().is_none() {
                // One level: its stale entries are skipped as they are popped.
                return Some((highest, false));
            }
        }
        // Several: a stale front must not count as a level with keys (it
        // would flip the aged turn) nor stand for its level's age.
        let slots = &self.slots;
        self.stale_ready -= self.levels.drop_stale_fronts(|e| !is_live(slots, e));
        let mut fronts = self.levels.fronts();
        let (highest, _) = fronts.next()?;
        let mut lower = fronts.peekable();
        if lower.peek().is_none() {
            return Some((highest, false));
        }
        if !self.aged_turn {
            return Some((highest, true));
        }
        let aged = lower
            .filter(|(_, e)| now.saturating_duration_since(e.since) >= self.max_wait)
            .min_by_key(|(_, e)| e.since);
        Some((aged.map_or(highest, |(at, _)| at), true))
    }

    /// Gives the key map's memory back after a burst (see `shrink`).
    fn shrink_slots_if_sparse(&mut self) {
        if shrink::is_sparse(self.slots.len(), self.slots.capacity()) {
            self.slots.shrink_to(shrink::target(self.slots.len()));
        }
    }

    fn compact_if_needed(&mut self) {
        if self.stale_timers > COMPACT_FLOOR && self.stale_timers > self.scheduled {
            let slots = &self.slots;
            self.timers.retain(|t| {
                slots
                    .get(&t.key)
                    .and_then(|s| s.timer())
                    .is_some_and(|timer| timer.seq == t.seq)
            });
            self.stale_timers = 0;
        }
        if self.stale_ready > COMPACT_FLOOR && self.stale_ready > self.ready {
            let slots = &self.slots;
            self.levels.retain(|e| is_live(slots, e));
            self.stale_ready = 0;
        }
    }
}

/// Whether `entry` is its key's live ready entry.
fn is_live<K: QueueKey>(slots: &HashMap<K, Slot, RandomState>, entry: &ReadyEntry<K>) -> bool {
    slots
        .get(&entry.key)
        .and_then(|s| s.queued())
        .is_some_and(|q| q.seq == entry.seq)
}

fn push_ready<K>(levels: &mut Levels<K>, priority: Priority, seq: u64, since: Stamp, key: K) {
    levels.push(priority, ReadyEntry { seq, since, key });
}
