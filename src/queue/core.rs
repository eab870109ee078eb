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
//! - Each pending state carries a payload (`T: Payload`, opaque here)
//!   merged by every add that lands on it and handed out with the key (the
//!   controller's "why did this run"). A timer's payload counts only if it
//!   fires: an add that makes the key ready sooner cancels the timer and its
//!   payload with it.
//! - A debounced add (a change event, when the queue debounces) sets a
//!   debounced timer `window` ahead, which later debounced adds push back,
//!   never past `max` after the first of them (its limit). Its payload records
//!   changes that happened, so they outlive it when an add or an earlier
//!   timer replaces it. It never delays a key that is ready, nor a plain
//!   timer (a retry, a requeue) due sooner. In flight, only debounced adds
//!   leave a dirty key debounced: `done` then schedules it a window later
//!   (bounded from its first add) instead of making it ready.
//! - `levels` and `timers` (in `Lanes`) may hold stale entries (a key
//!   re-prioritised, a timer superseded); an entry is live iff its `seq`
//!   equals the one in the key's slot. Stale entries are counted and
//!   compacted when they outnumber live ones, so memory stays bounded by
//!   live keys.
//!
//! Each change of a key's state is one function of `Lanes` (`lanes.rs`:
//! make ready, cancel a timer, schedule, fire, start, end) over its `Slot`
//! (`slot.rs`); the functions here decide which transitions an operation
//! makes.

use std::collections::HashMap;

use std::time::Duration;

use foldhash::fast::RandomState;

use super::lanes::{Lanes, Place, Ready};
use super::levels::{GroupFn, ReadyEntry};
use super::payload::Payload;
use super::shrink;
use super::slot::{Dirty, IN_FLIGHT, Queued, Slot};
use super::stamp::Stamp;
use super::{Priority, QueueKey};

/// How a queue debounces change events (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Debounce {
    /// How long a key waits after its last change.
    pub(crate) window: Duration,
    /// How long at most it waits after the first change it waits for.
    pub(crate) max: Duration,
}

/// Stale entries tolerated before a compaction is considered.
const COMPACT_FLOOR: usize = 64;

pub(crate) struct Core<K, T = ()> {
    pub(super) slots: HashMap<K, Slot<T>, RandomState>,
    pub(super) lanes: Lanes<K>,
    pub(super) max_wait: Duration,
    pub(super) debounce: Option<Debounce>,
    pub(super) aged_turn: bool,
    pub(super) shut_down: bool,
    /// Bumped by every explicit shutdown: a drain that began at another
    /// value was cut short.
    pub(super) drain_cuts: u64,
    /// Workers sleeping until the earliest timer; when none is, a worker
    /// that takes a key must wake another to watch the timers.
    pub(super) timer_watchers: usize,
    pub(super) dropped: u64,
}

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
pub(crate) enum Next<K, T> {
    /// A key to process with its payload, how long it waited, and how many
    /// timers fired while looking (if more keys than this one became ready,
    /// another worker should be woken).
    Key {
        handed: Handed<K, T>,
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

/// A key handed to a worker with its payload, and what the queue needs to
/// take it back (`restore`): its priority and since when it was ready.
#[derive(Debug, Clone)]
pub(crate) struct Handed<K, T> {
    pub(crate) key: K,
    pub(crate) payload: T,
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
    /// The key was debounced again and its timer is the earliest: a worker
    /// sleeping until a later one must look again.
    pub(crate) earliest_timer: bool,
}

impl<K: QueueKey, T: Payload> Core<K, T> {
    pub(crate) fn new(max_wait: Duration) -> Self {
        Self {
            slots: HashMap::default(),
            lanes: Lanes::new(None),
            max_wait,
            debounce: None,
            aged_turn: false,
            shut_down: false,
            drain_cuts: 0,
            timer_watchers: 0,
            dropped: 0,
        }
    }

    /// Debounces change events (see the module docs): [`debounce`](Self::debounce)
    /// adds are plain adds without it.
    pub(crate) fn with_debounce(mut self, debounce: Debounce) -> Self {
        self.debounce = Some(debounce);
        self
    }

    /// Serves each level fairly across the groups `group` puts keys in
    /// (see `groups.rs`); set before any key is added.
    pub(crate) fn with_groups(mut self, group: GroupFn<K>) -> Self {
        self.lanes = Lanes::new(Some(group));
        self
    }

    /// Ready keys in `group` (a hash from the group function; 0 without one).
    pub(crate) fn ready_in_group(&self, group: u64) -> usize {
        self.lanes.levels.ready_in_group(group)
    }

    pub(crate) fn next(&mut self, now: Stamp) -> Next<K, T> {
        if self.shut_down {
            return Next::ShutDown;
        }
        let fired = self.fire_timers(now);
        let Some((key, queued)) = self.pop_ready(now) else {
            return Next::Empty {
                wake_at: self.lanes.timers.peek().map(|t| t.deadline),
                fired,
            };
        };
        Next::Key {
            handed: Handed {
                key,
                payload: queued.payload,
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
        self.lanes.end(slot);
        let mut finished = Finished {
            worked: now.saturating_duration_since(started),
            requeued: false,
            earliest_timer: false,
        };
        let Some(dirty) = slot.take_dirty() else {
            if slot.is_empty() {
                self.slots.remove(key);
                self.shrink_slots_if_sparse();
            }
            return Ok(finished);
        };
        // A dirty key is not queued (adds only marked it dirty) and has no
        // timer (marking it dirty cancelled that, and later timers dedup).
        let ready = Ready {
            priority: dirty.priority,
            since: dirty.since,
            payload: dirty.payload,
        };
        if let Some((deadline, limit)) = debounced_again(self.debounce, &dirty, now) {
            let ready = Ready {
                since: deadline,
                ..ready
            };
            finished.earliest_timer =
                self.lanes
                    .schedule(slot, key.clone(), deadline, ready, Some(limit));
            return Ok(finished);
        }
        self.lanes.make_ready(slot, key.clone(), ready, Place::Back);
        finished.requeued = true;
        Ok(finished)
    }

    /// Hands back a key taken but not started: ready again first in its
    /// level, with its priority, payload and age, as if never taken. What an
    /// add made dirty meanwhile is merged in, and a timer set meanwhile is
    /// cancelled (ready is sooner). After shutdown the key is dropped.
    pub(crate) fn restore(&mut self, handed: Handed<K, T>) -> Restored {
        let Handed {
            key,
            priority,
            payload,
            since,
        } = handed;
        let Some(slot) = self.slots.get_mut(&key).filter(|s| s.has(IN_FLIGHT)) else {
            return Restored::NotInFlight;
        };
        self.lanes.end(slot);
        if self.shut_down {
            // Shutdown kept only the in-flight mark; nothing else is pending.
            self.slots.remove(&key);
            self.shrink_slots_if_sparse();
            self.dropped += 1;
            return Restored::Dropped;
        }
        let mut ready = Ready {
            priority,
            since,
            payload,
        };
        if let Some(dirty) = slot.take_dirty() {
            ready.priority = ready.priority.max(dirty.priority);
            ready.payload.merge(dirty.payload);
            ready.since = ready.since.min(dirty.since);
        }
        if let Some(timer) = self.lanes.cancel_timer(slot) {
            ready.priority = ready.priority.max(timer.priority);
            ready.payload = timer.merge_kept(ready.payload);
        }
        self.lanes.make_ready(slot, key, ready, Place::Front);
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
        // Keep only the in-flight keys, without their dirty state.
        self.slots.retain(|_, slot| {
            slot.take_queued();
            slot.take_timer();
            dirty += usize::from(slot.take_dirty().is_some());
            slot.has(IN_FLIGHT)
        });
        let (ready, scheduled) = self.lanes.clear();
        let dropped = (ready + scheduled + dirty) as u64;
        self.dropped += dropped;
        dropped
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Shut down with nothing in flight: every drain is over.
    pub(crate) fn is_idle_after_shutdown(&self) -> bool {
        self.shut_down && self.lanes.in_flight == 0
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
        self.lanes.in_flight == 0 || self.drain_cuts != epoch
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
        self.lanes.scheduled > 0 && self.timer_watchers == 0
    }

    /// Keys with a slot: ready, scheduled or in flight.
    pub(crate) fn keys_len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn ready_len(&self) -> usize {
        self.lanes.ready
    }

    pub(crate) fn scheduled_len(&self) -> usize {
        self.lanes.scheduled
    }

    pub(crate) fn in_flight_len(&self) -> usize {
        self.lanes.in_flight
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
        self.lanes.timers.len()
    }

    /// Memory held by the key map, the ready levels and the timer heap, in
    /// entries (for tests of shrinking).
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn capacities(&self) -> (usize, usize, usize) {
        (
            self.slots.capacity(),
            self.lanes.levels.capacity(),
            self.lanes.timers.capacity(),
        )
    }

    /// Ready entries, live or stale (for tests of compaction).
    #[cfg(all(test, not(tend_loom)))]
    pub(crate) fn ready_entries(&self) -> usize {
        self.lanes.levels.entries()
    }

    /// Moves every due timer's key to ready (or marks it dirty when it is in
    /// flight); returns how many fired.
    fn fire_timers(&mut self, now: Stamp) -> usize {
        let mut fired = 0;
        while let Some(entry) = self.lanes.pop_due(now) {
            let live = self
                .slots
                .get_mut(&entry.key)
                .filter(|slot| slot.timer().is_some_and(|t| t.seq == entry.seq));
            let Some(slot) = live else {
                self.lanes.stale_timers -= 1;
                continue;
            };
            let Some(timer) = self.lanes.fire(slot) else {
                continue;
            };
            fired += 1;
            if slot.has(IN_FLIGHT) {
                slot.mark_dirty(timer.priority, entry.deadline, timer.payload, false);
                continue;
            }
            // A debounced key waited from its first change (its limit is
            // that plus the longest debounce, unless that saturated): it
            // counts as queued since.
            let since = match (timer.limit, self.debounce) {
                (Some(limit), Some(debounce)) if limit.0 != u64::MAX => {
                    limit.before(debounce.max).min(entry.deadline)
                }
                _ => entry.deadline,
            };
            let ready = Ready {
                priority: timer.priority,
                since,
                payload: timer.payload,
            };
            self.lanes.make_ready(slot, entry.key, ready, Place::Back);
        }
        if fired > 0 {
            self.lanes.shrink_timers_if_sparse();
        }
        fired
    }

    /// Pops the next live ready key: the highest priority level's oldest key,
    /// except that on every other pop a key that has waited longer than
    /// `max_wait` in a lower level goes first, so low priorities never starve
    /// yet never take more than half the throughput from fresh changes. The
    /// key is marked in flight.
    fn pop_ready(&mut self, now: Stamp) -> Option<(K, Queued<T>)> {
        loop {
            let (at, several_levels) = self.choose_level(now)?;
            let entry = self.lanes.levels.pop(at)?;
            let live = self
                .slots
                .get_mut(&entry.key)
                .filter(|slot| slot.queued().is_some_and(|q| q.seq == entry.seq));
            let Some(slot) = live else {
                self.lanes.stale_ready -= 1;
                continue;
            };
            self.lanes.stale_ready -= self.lanes.levels.served(at);
            let queued = self.lanes.start(slot, now)?;
            if several_levels {
                self.aged_turn = !self.aged_turn;
            }
            return Some((entry.key, queued));
        }
    }

    /// The level to pop from, and whether several levels had keys.
    fn choose_level(&mut self, now: Stamp) -> Option<(usize, bool)> {
        {
            let mut fronts = self.lanes.levels.fronts();
            let (highest, _) = fronts.next()?;
            if fronts.next().is_none() {
                // One level: its stale entries are skipped as they are popped.
                return Some((highest, false));
            }
        }
        // Several: a stale front must not count as a level with keys (it
        // would flip the aged turn) nor stand for its level's age.
        let slots = &self.slots;
        let lanes = &mut self.lanes;
        lanes.stale_ready -= lanes.levels.drop_stale_fronts(|e| !is_live(slots, e));
        let mut fronts = self.lanes.levels.fronts();
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

    pub(super) fn compact_if_needed(&mut self) {
        let (slots, lanes) = (&self.slots, &mut self.lanes);
        if lanes.stale_timers > COMPACT_FLOOR && lanes.stale_timers > lanes.scheduled {
            lanes.timers.retain(|t| {
                slots
                    .get(&t.key)
                    .and_then(|s| s.timer())
                    .is_some_and(|timer| timer.seq == t.seq)
            });
            lanes.stale_timers = 0;
        }
        if lanes.stale_ready > COMPACT_FLOOR && lanes.stale_ready > lanes.ready {
            lanes.levels.retain(|e| is_live(slots, e));
            lanes.stale_ready = 0;
        }
    }
}

/// Whether `entry` is its key's live ready entry.
fn is_live<K: QueueKey, T: Payload>(
    slots: &HashMap<K, Slot<T>, RandomState>,
    entry: &ReadyEntry<K>,
) -> bool {
    slots
        .get(&entry.key)
        .and_then(|s| s.queued())
        .is_some_and(|q| q.seq == entry.seq)
}

/// When a key made dirty by debounced adds only runs again: a window after
/// `now`, at most its limit from the first of those adds (`None`: now).
fn debounced_again<T>(
    debounce: Option<Debounce>,
    dirty: &Dirty<T>,
    now: Stamp,
) -> Option<(Stamp, Stamp)> {
    let debounce = debounce.filter(|_| dirty.debounced)?;
    let limit = dirty.since.after(debounce.max);
    let deadline = now.after(debounce.window).min(limit);
    (deadline > now).then_some((deadline, limit))
}
