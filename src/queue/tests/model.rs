//! The core against a model of it, on random sequences of adds, timers,
//! debounces, merges, gets, restores, dones and a shutdown.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::turns::Turns;
use super::{Bits, NONE};
use crate::queue::Priority;

#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    Add(u8, i8, Bits),
    AddAfter(u8, u64, i8, Bits),
    Debounce(u8, i8, Bits),
    MergePending(u8, Bits),
    Get,
    Done(usize),
    Restore(usize),
    Advance(u64),
    Shutdown,
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..12u8, -1..=1i8, bit()).prop_map(|(k, p, m)| Op::Add(k, p, m)),
        2 => (0..12u8, 0..50u64, -1..=1i8, bit()).prop_map(|(k, d, p, m)| Op::AddAfter(k, d, p, m)),
        // Few keys, so that windows slide and reach their bound.
        3 => (0..4u8, -1..=1i8, bit()).prop_map(|(k, p, m)| Op::Debounce(k, p, m)),
        1 => (0..12u8, bit()).prop_map(|(k, m)| Op::MergePending(k, m)),
        4 => Just(Op::Get),
        3 => (0..8usize).prop_map(Op::Done),
        1 => (0..8usize).prop_map(Op::Restore),
        2 => (0..30u64).prop_map(Op::Advance),
        1 => Just(Op::Shutdown),
    ]
}

/// One of four bits.
fn bit() -> impl Strategy<Value = Bits> {
    (0..4u8).prop_map(|bit| Bits(1 << bit))
}

/// A ready key in the model.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ready {
    pub(super) key: u8,
    pub(super) priority: Priority,
    /// Its place in its group at its level (lower first).
    pub(super) order: i64,
    /// Since when it is ready, in ms.
    since: u64,
    payload: Bits,
}

/// A timer in the model.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timer {
    at: u64,
    order: i64,
    payload: Bits,
    priority: Priority,
    /// A debounced timer: the latest it may be pushed back to.
    limit: Option<u64>,
}

impl Timer {
    /// A debounced timer's payload records changes: it outlives the timer.
    fn kept(&self) -> Bits {
        if self.limit.is_some() {
            self.payload
        } else {
            NONE
        }
    }
}

/// A key in flight that was added to meanwhile.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dirty {
    priority: Priority,
    /// The first add while in flight.
    since: u64,
    payload: Bits,
    /// Only debounced adds, and no plain timer, made it dirty.
    debounced: bool,
}

/// A plainly written reference queue. Orders are relative: a counter stamps
/// ready entries and timers in the order the core stamps its sequence numbers.
/// Payloads follow the pending state they were added to. Times are in ms.
#[derive(Default)]
pub(super) struct Model {
    pub(super) ready: Vec<Ready>,
    pub(super) timers: HashMap<u8, Timer>,
    /// Since when each key in flight had been ready.
    pub(super) in_flight: HashMap<u8, u64>,
    pub(super) dirty: HashMap<u8, Dirty>,
    pub(super) shut_down: bool,
    pub(super) stamp: i64,
    /// Stamps for keys put back first in their level, counting down.
    pub(super) front: i64,
    pub(super) max_wait: u64,
    /// Whether the next pop among several levels serves an aged key first.
    pub(super) aged_turn: bool,
    /// The debounce window and bound, in ms.
    pub(super) debounce: Option<(u64, u64)>,
    pub(super) turns: Turns,
}

impl Model {
    pub(super) fn new(
        max_wait: u64,
        debounce: Option<(u64, u64)>,
        group: Option<fn(u8) -> u8>,
    ) -> Self {
        Self {
            max_wait,
            debounce,
            turns: Turns::new(group),
            ..Self::default()
        }
    }

    pub(super) fn stamp(&mut self) -> i64 {
        self.stamp += 1;
        self.stamp
    }

    /// A key taken but not started comes back first in its level, merged
    /// with an add made meanwhile; a timer set meanwhile is cancelled.
    pub(super) fn restore(&mut self, key: u8, mut priority: Priority, mut payload: Bits) {
        let mut since = self.in_flight.remove(&key).expect("in flight");
        if self.shut_down {
            return;
        }
        if let Some(dirty) = self.dirty.remove(&key) {
            priority = priority.max(dirty.priority);
            payload |= dirty.payload;
            since = since.min(dirty.since);
        }
        if let Some(timer) = self.timers.remove(&key) {
            priority = priority.max(timer.priority);
            payload |= timer.kept();
        }
        self.front -= 1;
        let order = self.front;
        self.turns.restored(key, priority);
        self.ready.push(Ready {
            key,
            priority,
            order,
            since,
            payload,
        });
    }

    /// An add while in flight: dirty, replacing a timer at the higher priority.
    pub(super) fn add_dirty(
        &mut self,
        key: u8,
        priority: Priority,
        payload: Bits,
        now: u64,
        debounced: bool,
    ) {
        if let Some(dirty) = self.dirty.get_mut(&key) {
            dirty.priority = dirty.priority.max(priority);
            dirty.payload |= payload;
            dirty.debounced &= debounced;
            return;
        }
        let (priority, payload, debounced) = match self.timers.remove(&key) {
            Some(timer) => (
                priority.max(timer.priority),
                payload | timer.kept(),
                debounced && timer.limit.is_some(),
            ),
            None => (priority, payload, debounced),
        };
        let dirty = Dirty {
            priority,
            since: now,
            payload,
            debounced,
        };
        self.dirty.insert(key, dirty);
    }

    /// An add at `now` (a timer's deadline when it fires).
    pub(super) fn add(&mut self, key: u8, priority: Priority, payload: Bits, now: u64) {
        if self.shut_down {
            return;
        }
        if self.in_flight.contains_key(&key) {
            return self.add_dirty(key, priority, payload, now, false);
        }
        // Replacing a timer never demotes the key below the timer's
        // priority; a plain timer's payload goes with it.
        let timer = self.timers.remove(&key);
        let order = self.stamp();
        if let Some(at) = self.ready.iter().position(|e| e.key == key) {
            self.ready[at].payload |= payload;
            // A raised priority moves the key to the back of its new level,
            // keeping its age.
            let old = self.ready[at].priority;
            if priority > old {
                self.turns.left(&self.ready, key, old, false);
                (self.ready[at].priority, self.ready[at].order) = (priority, order);
                self.turns.arrived(&self.ready, key, priority);
            }
            return;
        }
        let (priority, payload) = match timer {
            Some(timer) => (priority.max(timer.priority), payload | timer.kept()),
            None => (priority, payload),
        };
        self.turns.arrived(&self.ready, key, priority);
        self.ready.push(Ready {
            key,
            priority,
            order,
            since: now,
            payload,
        });
    }

    pub(super) fn add_after(
        &mut self,
        key: u8,
        at: u64,
        now: u64,
        priority: Priority,
        payload: Bits,
    ) {
        if self.shut_down {
            return;
        }
        if at <= now {
            return self.add(key, priority, payload, now);
        }
        if let Some(dirty) = self.dirty.get_mut(&key) {
            // Runs at `done`, not a window later: this timer may be sooner.
            dirty.debounced = false;
            return;
        }
        if self.ready.iter().any(|e| e.key == key) {
            return;
        }
        let order = self.stamp();
        match self.timers.get_mut(&key) {
            // Due sooner already: it stays, at the higher priority.
            Some(timer) if timer.at <= at => timer.priority = timer.priority.max(priority),
            Some(timer) => {
                *timer = Timer {
                    at,
                    order,
                    payload: payload | timer.kept(),
                    priority: timer.priority.max(priority),
                    limit: None,
                };
            }
            None => {
                let timer = Timer {
                    at,
                    order,
                    payload,
                    priority,
                    limit: None,
                };
                self.timers.insert(key, timer);
            }
        }
    }

    /// A change event: ready a window after its last change, at most the
    /// bound after the first; never later than a plain timer due sooner.
    pub(super) fn debounce(&mut self, key: u8, priority: Priority, payload: Bits, now: u64) {
        let Some((window, max)) = self.debounce.filter(|_| !self.shut_down) else {
            return self.add(key, priority, payload, now);
        };
        if self.in_flight.contains_key(&key) {
            return self.add_dirty(key, priority, payload, now, true);
        }
        if self.ready.iter().any(|e| e.key == key) {
            return self.add(key, priority, payload, now);
        }
        let old = self.timers.get(&key).copied();
        let limit = old.and_then(|t| t.limit).unwrap_or(now + max);
        let at = (now + window).min(limit);
        let stays = |t: &&mut Timer| match t.limit {
            None => t.at <= at,
            Some(_) => t.at >= at,
        };
        if let Some(timer) = self.timers.get_mut(&key).filter(stays) {
            timer.priority = timer.priority.max(priority);
            timer.payload |= payload;
            return;
        }
        let order = self.stamp();
        let timer = Timer {
            at,
            order,
            payload: payload | old.map_or(NONE, |t| t.kept()),
            priority: old.map_or(priority, |t| t.priority.max(priority)),
            limit: Some(limit),
        };
        self.timers.insert(key, timer);
    }

    pub(super) fn merge_pending(&mut self, key: u8, payload: Bits) -> bool {
        if let Some(entry) = self.ready.iter_mut().find(|e| e.key == key) {
            entry.payload |= payload;
        } else if let Some(timer) = self.timers.get_mut(&key) {
            timer.payload |= payload;
        } else if let Some(dirty) = self.dirty.get_mut(&key) {
            dirty.payload |= payload;
            dirty.debounced = false;
        } else {
            return false;
        }
        true
    }

    /// Due timers, earliest first, make their keys ready as of their deadline.
    pub(super) fn fire(&mut self, now: u64) {
        let mut due: Vec<_> = self
            .timers
            .iter()
            .filter(|(_, t)| t.at <= now)
            .map(|(k, t)| (t.at, t.order, *k, t.payload, t.priority, t.limit))
            .collect();
        due.sort_unstable();
        for (at, _, key, payload, priority, limit) in due {
            self.timers.remove(&key);
            // A debounced key counts as queued since its first change.
            let since = match (limit, self.debounce) {
                (Some(limit), Some((_, max))) => limit.saturating_sub(max).min(at),
                _ => at,
            };
            self.add(key, priority, payload, since);
        }
    }

    /// The key to serve: the next (see `Turns::fronts`) of the highest
    /// level; but every other time several levels have keys, the longest
    /// waiting of the lower levels' next keys if it has waited `max_wait`.
    pub(super) fn choose(&self, now: u64) -> Option<(usize, bool)> {
        let fronts = self.turns.fronts(&self.ready);
        let (highest, _) = *fronts.first()?;
        let several = fronts.len() > 1;
        let aged = fronts
            .iter()
            .skip(1)
            .filter(|(_, f)| now - f.since >= self.max_wait)
            .min_by_key(|(_, f)| f.since);
        match aged {
            Some(&(i, _)) if several && self.aged_turn => Some((i, true)),
            _ => Some((highest, several)),
        }
    }

    /// The key handed out, its payload and how long it waited.
    pub(super) fn next(&mut self, now: u64) -> Option<(u8, Bits, Duration)> {
        self.fire(now);
        let (at, several) = self.choose(now)?;
        if several {
            self.aged_turn = !self.aged_turn;
        }
        let (key, priority) = (self.ready[at].key, self.ready[at].priority);
        self.turns.left(&self.ready, key, priority, true);
        let entry = self.ready.remove(at);
        self.in_flight.insert(entry.key, entry.since);
        let waited = Duration::from_millis(now - entry.since);
        Some((entry.key, entry.payload, waited))
    }

    /// Ends `key` at `now`: a dirty key is ready again, or debounced a
    /// window later (bounded from its first add) if only changes made it
    /// dirty.
    pub(super) fn done(&mut self, key: u8, now: u64) {
        self.in_flight.remove(&key);
        let Some(dirty) = self.dirty.remove(&key) else {
            return;
        };
        let order = self.stamp();
        if let Some((window, max)) = self.debounce.filter(|_| dirty.debounced) {
            let limit = dirty.since + max;
            let at = (now + window).min(limit);
            if at > now {
                let timer = Timer {
                    at,
                    order,
                    payload: dirty.payload,
                    priority: dirty.priority,
                    limit: Some(limit),
                };
                self.timers.insert(key, timer);
                return;
            }
        }
        self.turns.arrived(&self.ready, key, dirty.priority);
        self.ready.push(Ready {
            key,
            priority: dirty.priority,
            order,
            since: dirty.since,
            payload: dirty.payload,
        });
    }
}
