//! Unit and property tests of the synchronous core, with explicit time.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::Payload;
use super::Priority;
use super::core::{Added, Core, Handed, Next, Restored, Scheduled};
use super::stamp::Stamp;

const HOUR: Duration = Duration::from_secs(3600);

/// The tests' payload: bits merged by OR, as the controller's `Triggers`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Bits(u16);

impl Payload for Bits {
    fn merge(&mut self, other: Self) {
        self.0 |= other.0;
    }
}

impl std::ops::BitOr for Bits {
    type Output = Self;
    fn bitor(mut self, other: Self) -> Self {
        self.merge(other);
        self
    }
}

impl std::ops::BitOrAssign for Bits {
    fn bitor_assign(&mut self, other: Self) {
        self.merge(other);
    }
}

const NONE: Bits = Bits(0);

fn take(core: &mut Core<u8>, now: Stamp) -> Option<u8> {
    match core.next(now) {
        Next::Key { handed, .. } => Some(handed.key),
        Next::Empty { .. } | Next::ShutDown => None,
    }
}

#[test]
fn stale_timers_are_compacted_so_memory_follows_live_keys() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    for round in 0..10_000u32 {
        // A long timer superseded by an immediate add leaves a stale heap entry.
        core.add_after(1u8, t0.after(HOUR), Priority::NORMAL, (), t0);
        core.add(1, Priority::NORMAL, (), || t0);
        assert_eq!(take(&mut core, t0), Some(1), "round {round}");
        core.done(&1, t0).expect("in flight");
    }
    assert!(
        core.timer_entries() <= 2 * 64 + 2,
        "{}",
        core.timer_entries()
    );
}

/// Adds `n` keys (ready, or each on a timer), then takes and ends them all.
fn burst(core: &mut Core<u32>, n: u32, timed: bool, t0: Stamp) {
    for key in 0..n {
        if timed {
            core.add_after(
                key,
                t0.after(Duration::from_millis(1)),
                Priority::NORMAL,
                (),
                t0,
            );
        } else {
            core.add(key, Priority::NORMAL, (), || t0);
        }
    }
    let later = t0.after(Duration::from_secs(1));
    while let Next::Key { handed, .. } = core.next(later) {
        core.done(&handed.key, later).expect("in flight");
    }
}

#[test]
fn memory_is_given_back_after_a_burst_drains() {
    let t0 = Stamp::default();
    for timed in [false, true] {
        let mut core = Core::new(HOUR);
        burst(&mut core, 100_000, timed, t0);
        let (slots, ready, timers) = core.capacities();
        assert!(
            slots <= 2048 && ready <= 2048 && timers <= 2048,
            "timed: {timed}, capacities after draining 100k keys: {slots}, {ready}, {timers}"
        );
    }
}

#[test]
fn a_steady_load_keeps_its_capacity() {
    let t0 = Stamp::default();
    let mut core = Core::new(HOUR);
    burst(&mut core, 10_000, false, t0);
    // Refill to the same size, drain, again: capacity swings only by the
    // amortised shrink, never below what one round needs.
    for _ in 0..10 {
        for key in 0..10_000u32 {
            core.add(key, Priority::NORMAL, (), || t0);
        }
        let (slots, ready, _) = core.capacities();
        assert!(slots >= 10_000 && ready >= 10_000);
        while let Next::Key { handed, .. } = core.next(t0) {
            core.done(&handed.key, t0).expect("in flight");
        }
    }
}

#[test]
fn re_prioritised_keys_are_compacted() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    for key in 0..200u8 {
        core.add(key, Priority::LOW, (), || t0);
        core.add(key, Priority::HIGH, (), || t0);
    }
    // Stale entries never outnumber live ones by more than the floor.
    assert!(
        core.ready_entries() <= 2 * 200 + 64 + 1,
        "{}",
        core.ready_entries()
    );
    assert_eq!(core.ready_len(), 200);
}

#[test]
fn a_timer_firing_for_an_in_flight_key_marks_it_dirty() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(7u8, Priority::NORMAL, (), || t0);
    assert_eq!(take(&mut core, t0), Some(7));
    let due = t0.after(Duration::from_secs(1));
    assert_eq!(
        core.add_after(7, due, Priority::NORMAL, (), t0),
        Scheduled::Timer { earliest: true }
    );
    assert!(matches!(
        core.next(due),
        Next::Empty {
            wake_at: None,
            fired: 1
        }
    ));
    assert!(core.done(&7, due).expect("in flight").requeued);
    assert_eq!(take(&mut core, due), Some(7));
}

#[test]
fn a_re_prioritised_keys_old_entry_does_not_count_as_a_level_with_keys() {
    let second = Duration::from_secs(1);
    let mut core = Core::new(second);
    let t0 = Stamp::default();
    // Key 1 moves from low to normal, leaving an entry behind in low.
    core.add(1u8, Priority::LOW, (), || t0);
    core.add(1, Priority::NORMAL, (), || t0);
    core.add(2, Priority::NORMAL, (), || t0);
    // Only one level has keys: this is no turn between levels.
    assert_eq!(take(&mut core, t0), Some(1));
    core.add(3, Priority::LOW, (), || t0);
    let later = t0.after(2 * second);
    assert_eq!(take(&mut core, later), Some(2), "the normal level's turn");
    assert_eq!(take(&mut core, later), Some(3), "the aged key's turn");
}

fn take_with_payload(core: &mut Core<u8, Bits>, now: Stamp) -> Option<(u8, Bits)> {
    match core.next(now) {
        Next::Key { handed, .. } => Some((handed.key, handed.payload)),
        Next::Empty { .. } | Next::ShutDown => None,
    }
}

#[test]
fn payloads_of_deduplicated_adds_are_merged() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(1u8, Priority::LOW, Bits(0b001), || t0);
    core.add(1, Priority::LOW, Bits(0b010), || t0);
    // A raised priority moves the key and keeps what it had.
    core.add(1, Priority::HIGH, Bits(0b100), || t0);
    assert_eq!(take_with_payload(&mut core, t0), Some((1, Bits(0b111))));
    assert_eq!(take_with_payload(&mut core, t0), None);
}

#[test]
fn payloads_added_while_in_flight_go_to_the_next_run() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(1u8, Priority::NORMAL, Bits(0b001), || t0);
    assert_eq!(take_with_payload(&mut core, t0), Some((1, Bits(0b001))));
    core.add(1, Priority::NORMAL, Bits(0b010), || t0);
    core.add(1, Priority::NORMAL, Bits(0b100), || t0);
    assert!(core.done(&1, t0).expect("in flight").requeued);
    assert_eq!(take_with_payload(&mut core, t0), Some((1, Bits(0b110))));
}

#[test]
fn a_timers_payload_counts_only_when_it_fires() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    let due = t0.after(Duration::from_secs(1));
    // Fired: its payload comes with the key.
    core.add_after(1u8, due, Priority::NORMAL, Bits(0b001), t0);
    assert_eq!(take_with_payload(&mut core, due), Some((1, Bits(0b001))));
    core.done(&1, due).expect("in flight");
    // Cancelled by an add that makes the key ready sooner: its payload goes too.
    let later = due.after(Duration::from_secs(1));
    core.add_after(1, later, Priority::NORMAL, Bits(0b001), due);
    core.add(1, Priority::NORMAL, Bits(0b010), || due);
    assert_eq!(take_with_payload(&mut core, due), Some((1, Bits(0b010))));
    core.done(&1, due).expect("in flight");
    // A timer due while the key is in flight marks it dirty with its payload.
    core.add(1, Priority::NORMAL, NONE, || later);
    assert_eq!(take_with_payload(&mut core, later), Some((1, NONE)));
    let soon = later.after(Duration::from_secs(1));
    core.add_after(1, soon, Priority::NORMAL, Bits(0b100), later);
    assert_eq!(take_with_payload(&mut core, soon), None);
    assert!(core.done(&1, soon).expect("in flight").requeued);
    assert_eq!(take_with_payload(&mut core, soon), Some((1, Bits(0b100))));
}

#[test]
fn merging_into_a_pending_key_reaches_its_next_run() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    assert!(
        !core.merge_pending(&1u8, Bits(0b001)),
        "no slot: not pending"
    );
    core.add(1, Priority::NORMAL, Bits(0b001), || t0);
    assert!(core.merge_pending(&1, Bits(0b010)), "ready");
    assert_eq!(take_with_payload(&mut core, t0), Some((1, Bits(0b011))));
    assert!(!core.merge_pending(&1, Bits(0b100)), "in flight, not dirty");
    core.add(1, Priority::NORMAL, NONE, || t0);
    assert!(core.merge_pending(&1, Bits(0b100)), "dirty");
    core.done(&1, t0).expect("in flight");
    assert_eq!(take_with_payload(&mut core, t0), Some((1, Bits(0b100))));
    core.done(&1, t0).expect("in flight");
    let due = t0.after(Duration::from_secs(1));
    core.add_after(1, due, Priority::NORMAL, NONE, t0);
    assert!(core.merge_pending(&1, Bits(0b1000)), "scheduled");
    assert_eq!(take_with_payload(&mut core, due), Some((1, Bits(0b1000))));
}

fn take_next(core: &mut Core<u8, Bits>, now: Stamp) -> (Handed<u8, Bits>, Duration) {
    match core.next(now) {
        Next::Key { handed, waited, .. } => (handed, waited),
        other => panic!("expected a key, got {other:?}"),
    }
}

#[test]
fn a_restored_key_goes_first_in_its_level_with_its_age() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    let t1 = t0.after(Duration::from_secs(1));
    let t2 = t0.after(Duration::from_secs(2));
    core.add(1u8, Priority::LOW, Bits(0b01), || t0);
    core.add(2, Priority::LOW, NONE, || t1);
    let (handed, _) = take_next(&mut core, t1);
    assert_eq!(handed.key, 1);
    assert_eq!(core.restore(handed), Restored::Ready);
    assert_eq!(core.in_flight_len(), 0);
    let (handed, waited) = take_next(&mut core, t2);
    assert_eq!(
        (handed.key, handed.payload, handed.priority),
        (1, Bits(0b01), Priority::LOW)
    );
    assert_eq!(waited, Duration::from_secs(2), "its age counts from t0");
}

#[test]
fn restoring_merges_an_add_made_while_held_and_cancels_a_timer() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(1u8, Priority::LOW, Bits(0b01), || t0);
    let (handed, _) = take_next(&mut core, t0);
    core.add_after(1, t0.after(HOUR), Priority::NORMAL, Bits(0b100), t0);
    assert_eq!(core.scheduled_len(), 1);
    assert_eq!(core.restore(handed), Restored::Ready);
    assert_eq!(core.scheduled_len(), 0, "ready now is sooner");
    let (handed, _) = take_next(&mut core, t0);
    assert_eq!(
        handed.priority,
        Priority::NORMAL,
        "a cancelled timer's key is not demoted"
    );
    assert_eq!(
        handed.payload,
        Bits(0b01),
        "the cancelled timer's payload go with it"
    );
    core.done(&1, t0).expect("in flight");

    core.add(1, Priority::LOW, Bits(0b01), || t0);
    let (handed, _) = take_next(&mut core, t0);
    core.add(1, Priority::HIGH, Bits(0b10), || t0);
    assert_eq!(core.restore(handed), Restored::Ready);
    assert_eq!(core.ready_len(), 1, "once, though dirty too");
    let (handed, _) = take_next(&mut core, t0);
    assert_eq!(
        (handed.payload, handed.priority),
        (Bits(0b11), Priority::HIGH)
    );
    assert!(!core.done(&1, t0).expect("in flight").requeued);
}

#[test]
fn restoring_after_shutdown_drops_the_key() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(1u8, Priority::NORMAL, NONE, || t0);
    let (handed, _) = take_next(&mut core, t0);
    let again = handed.clone();
    core.shut_down();
    assert_eq!(core.restore(handed), Restored::Dropped);
    assert_eq!(core.in_flight_len(), 0);
    assert_eq!(core.dropped(), 1);
    assert_eq!(core.restore(again), Restored::NotInFlight);
}

#[test]
fn adding_to_a_shut_down_core_is_rejected() {
    let mut core = Core::new(HOUR);
    let t0 = Stamp::default();
    core.add(1u8, Priority::NORMAL, NONE, || t0);
    assert_eq!(core.shut_down(), 1);
    assert_eq!(core.add(1, Priority::NORMAL, NONE, || t0), Added::Rejected);
    assert!(matches!(core.next(t0), Next::ShutDown));
}

/// One step of a random workload.
#[derive(Debug, Clone)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
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
struct Ready {
    key: u8,
    priority: Priority,
    /// Its place in its level (lower first).
    order: i64,
    /// Since when it is ready, in ms.
    since: u64,
    payload: Bits,
}

/// A timer in the model.
#[derive(Debug, Clone, Copy)]
struct Timer {
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
struct Dirty {
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
struct Model {
    ready: Vec<Ready>,
    timers: HashMap<u8, Timer>,
    /// Since when each key in flight had been ready.
    in_flight: HashMap<u8, u64>,
    dirty: HashMap<u8, Dirty>,
    shut_down: bool,
    stamp: i64,
    /// Stamps for keys put back first in their level, counting down.
    front: i64,
    max_wait: u64,
    /// Whether the next pop among several levels serves an aged key first.
    aged_turn: bool,
    /// The debounce window and bound, in ms.
    debounce: Option<(u64, u64)>,
}

impl Model {
    fn new(max_wait: u64, debounce: Option<(u64, u64)>) -> Self {
        Self {
            max_wait,
            debounce,
            ..Self::default()
        }
    }

    fn stamp(&mut self) -> i64 {
        self.stamp += 1;
        self.stamp
    }

    /// A key taken but not started comes back first in its level, merged
    /// with an add made meanwhile; a timer set meanwhile is cancelled.
    fn restore(&mut self, key: u8, mut priority: Priority, mut payload: Bits) {
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
        self.ready.push(Ready {
            key,
            priority,
            order,
            since,
            payload,
        });
    }

    /// An add while in flight: dirty, replacing a timer at the higher priority.
    fn add_dirty(&mut self, key: u8, priority: Priority, payload: Bits, now: u64, debounced: bool) {
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
    fn add(&mut self, key: u8, priority: Priority, payload: Bits, now: u64) {
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
        if let Some(entry) = self.ready.iter_mut().find(|e| e.key == key) {
            entry.payload |= payload;
            // A raised priority moves the key to the back of its new level,
            // keeping its age.
            if priority > entry.priority {
                (entry.priority, entry.order) = (priority, order);
            }
            return;
        }
        let (priority, payload) = match timer {
            Some(timer) => (priority.max(timer.priority), payload | timer.kept()),
            None => (priority, payload),
        };
        self.ready.push(Ready {
            key,
            priority,
            order,
            since: now,
            payload,
        });
    }

    fn add_after(&mut self, key: u8, at: u64, now: u64, priority: Priority, payload: Bits) {
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
    fn debounce(&mut self, key: u8, priority: Priority, payload: Bits, now: u64) {
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

    fn merge_pending(&mut self, key: u8, payload: Bits) -> bool {
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
    fn fire(&mut self, now: u64) {
        let mut due: Vec<_> = self
            .timers
            .iter()
            .filter(|(_, t)| t.at <= now)
            .map(|(k, t)| (t.at, t.order, *k, t.payload, t.priority))
            .collect();
        due.sort_unstable();
        for (at, _, key, payload, priority) in due {
            self.timers.remove(&key);
            self.add(key, priority, payload, at);
        }
    }

    /// The key to serve: the front (lowest order) of the highest level;
    /// but every other time several levels have keys, the longest waiting
    /// of the lower levels' fronts if it has waited `max_wait`.
    fn choose(&self, now: u64) -> Option<(usize, bool)> {
        let mut fronts: Vec<(usize, &Ready)> = Vec::new();
        for (i, entry) in self.ready.iter().enumerate() {
            match fronts
                .iter_mut()
                .find(|(_, f)| f.priority == entry.priority)
            {
                Some(front) if entry.order < front.1.order => *front = (i, entry),
                Some(_) => {}
                None => fronts.push((i, entry)),
            }
        }
        fronts.sort_by_key(|(_, f)| std::cmp::Reverse(f.priority));
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
    fn next(&mut self, now: u64) -> Option<(u8, Bits, Duration)> {
        self.fire(now);
        let (at, several) = self.choose(now)?;
        if several {
            self.aged_turn = !self.aged_turn;
        }
        let entry = self.ready.remove(at);
        self.in_flight.insert(entry.key, entry.since);
        let waited = Duration::from_millis(now - entry.since);
        Some((entry.key, entry.payload, waited))
    }

    /// Ends `key` at `now`: a dirty key is ready again, or debounced a
    /// window later (bounded from its first add) if only changes made it
    /// dirty.
    fn done(&mut self, key: u8, now: u64) {
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
        self.ready.push(Ready {
            key,
            priority: dirty.priority,
            order,
            since: dirty.since,
            payload: dirty.payload,
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The core against the model: same keys handed out in the same order
    /// (aging included: `max_wait` is within reach of the steps), with the
    /// same payload and waits, same sizes, and the five invariants checked
    /// after every step; with or without a debounce (window and bound
    /// within reach of the steps).
    #[test]
    fn core_behaves_like_the_model(
        max_wait in 0..80u64,
        debounce in proptest::option::of((1..20u64).prop_flat_map(|w| (Just(w), w..80))),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let t0 = Stamp::default();
        let ms = |m: u64| t0.after(Duration::from_millis(m));
        let mut core = Core::new(Duration::from_millis(max_wait));
        if let Some((window, max)) = debounce {
            let (window, max) = (Duration::from_millis(window), Duration::from_millis(max));
            core = core.with_debounce(super::core::Debounce { window, max });
        }
        let mut model = Model::new(max_wait, debounce);
        let mut now = 0u64;
        // Keys handed out, with what a restore needs.
        let mut held: Vec<Handed<u8, Bits>> = Vec::new();
        for op in ops {
            match op {
                Op::Add(key, p, payload) => {
                    core.add(key, Priority::new(p), payload, || ms(now));
                    model.add(key, Priority::new(p), payload, now);
                }
                Op::AddAfter(key, delay, p, payload) => {
                    core.add_after(key, ms(now + delay), Priority::new(p), payload, ms(now));
                    model.add_after(key, now + delay, now, Priority::new(p), payload);
                }
                Op::Debounce(key, p, payload) => {
                    core.debounce(key, Priority::new(p), payload, || ms(now));
                    model.debounce(key, Priority::new(p), payload, now);
                }
                Op::MergePending(key, payload) => {
                    let pending = core.merge_pending(&key, payload);
                    prop_assert_eq!(pending, !model.shut_down && model.merge_pending(key, payload));
                }
                Op::Get => {
                    let got = match core.next(ms(now)) {
                        Next::Key { handed, waited, .. } => Some((handed, waited)),
                        Next::Empty { .. } | Next::ShutDown => None,
                    };
                    let expected = if model.shut_down { None } else { model.next(now) };
                    prop_assert_eq!(got.as_ref().map(|(h, w)| (h.key, h.payload, *w)), expected);
                    if let Some((taken, _)) = got {
                        // Invariant 2: never handed to two workers at once.
                        prop_assert!(!held.iter().any(|h| h.key == taken.key), "{} handed out twice", taken.key);
                        held.push(taken);
                    }
                }
                Op::Restore(i) if !held.is_empty() => {
                    let handed = held.remove(i % held.len());
                    let (key, priority, payload) = (handed.key, handed.priority, handed.payload);
                    let restored = core.restore(handed);
                    let expected = if model.shut_down { Restored::Dropped } else { Restored::Ready };
                    prop_assert_eq!(restored, expected);
                    model.restore(key, priority, payload);
                }
                Op::Restore(_) => {
                    let stray = Handed { key: 0, payload: NONE, priority: Priority::NORMAL, since: ms(now) };
                    prop_assert_eq!(core.restore(stray), Restored::NotInFlight);
                }
                Op::Done(i) if !held.is_empty() => {
                    let key = held.remove(i % held.len()).key;
                    prop_assert!(core.done(&key, ms(now)).is_ok());
                    model.done(key, now);
                }
                Op::Done(_) => prop_assert!(core.done(&0, ms(now)).is_err()),
                Op::Advance(d) => now += d,
                Op::Shutdown => {
                    core.shut_down();
                    model.shut_down = true;
                    model.ready.clear();
                    model.timers.clear();
                    model.dirty.clear();
                }
            }
            // Invariant 1: each key at most once; sizes agree with the model.
            prop_assert_eq!(core.ready_len(), model.ready.len());
            prop_assert_eq!(core.scheduled_len(), model.timers.len());
            prop_assert_eq!(core.in_flight_len(), held.len());
        }
        // Invariant 3: nothing added is lost. Finish all work, let every
        // timer fire, and serve until empty: exactly the model's keys come out.
        if !model.shut_down {
            for Handed { key, .. } in held.drain(..) {
                core.done(&key, ms(now)).expect("in flight");
                model.done(key, now);
            }
            let later = now + 1_000;
            loop {
                let got = take_with_payload(&mut core, ms(later));
                prop_assert_eq!(got, model.next(later).map(|(key, payload, _)| (key, payload)));
                let Some((key, _)) = got else { break };
                core.done(&key, ms(later)).expect("in flight");
                model.done(key, later);
            }
        }
    }
}

mod runs {
    use std::time::Duration;

    use tokio::time::{Instant, timeout};

    use super::Bits;
    use crate::{Priority, When, WorkQueue};

    const LIMIT: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn a_run_takes_up_to_max_keys_and_leaves_spare_ones_ready() {
        let queue = WorkQueue::new();
        for key in 0..10u32 {
            queue.add(key);
        }
        let first = queue.get().await.expect("open");
        let mut batch = queue.batch();
        batch.finish(first, Duration::ZERO);
        batch.refill(Instant::now(), 4, 3);
        let keys: Vec<u32> = batch.unstarted().map(|h| h.key).collect();
        assert_eq!(keys, [1, 2, 3, 4], "in order, up to max");
        assert_eq!(queue.len(), 5);
        while let Some(handed) = batch.next(Instant::now(), 16, 3) {
            batch.finish(handed.key, Duration::ZERO);
            if !batch.has_unstarted() {
                break;
            }
        }
        // Five ready, three spare: two more at most, whatever `max`.
        batch.refill(Instant::now(), 16, 3);
        assert_eq!(batch.unstarted().count(), 2);
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.stats().in_flight, 2, "the first run is done");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_requeued_beyond_those_taken_wake_waiting_workers() {
        let queue = WorkQueue::new();
        queue.add("x");
        queue.add("y");
        let x = queue.get().await.expect("open");
        let y = queue.get().await.expect("open");
        // Both change while held: both run again.
        queue.add(x);
        queue.add(y);
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        let mut batch = queue.batch();
        batch.finish(x, Duration::ZERO);
        batch.finish(y, Duration::ZERO);
        batch.refill(Instant::now(), 1, 0);
        let taken: Vec<_> = batch.unstarted().map(|h| h.key).collect();
        assert_eq!(taken.len(), 1, "one key for this worker");
        let other = timeout(LIMIT, waiting)
            .await
            .expect("the waiting worker was not woken for the other key")
            .expect("task")
            .expect("open");
        assert_ne!(other, taken[0]);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_given_back_are_ready_again_with_their_payload_and_priority() {
        let queue = WorkQueue::builder().payload::<Bits>().build();
        queue.enqueue(1u32, When::Now, Priority::LOW, Bits(0b01));
        queue.enqueue(2u32, When::Now, Priority::HIGH, Bits(0b10));
        let mut batch = queue.batch();
        batch.refill(Instant::now(), 2, 0);
        assert_eq!(batch.unstarted().count(), 2);
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get_handed().await.map(|h| (h.key, h.payload)) }
        });
        tokio::task::yield_now().await;
        batch.release();
        let first = timeout(LIMIT, waiting)
            .await
            .expect("no worker was woken for the keys given back")
            .expect("task")
            .expect("open");
        assert_eq!(first, (2, Bits(0b10)), "the high-priority key first");
        assert_eq!(
            queue.get_handed().await.map(|h| (h.key, h.payload)),
            Some((1, Bits(0b01)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn giving_back_the_last_keys_in_flight_ends_a_drain() {
        let queue = WorkQueue::new();
        queue.add(1u32);
        let mut batch = queue.batch();
        batch.refill(Instant::now(), 1, 0);
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shutdown_with_drain().await }
        });
        tokio::task::yield_now().await;
        batch.release();
        timeout(LIMIT, drain)
            .await
            .expect("the drain did not end")
            .expect("task");
        assert_eq!(queue.stats().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_batch_hands_its_keys_back() {
        let queue = WorkQueue::new();
        for key in 0..3u32 {
            queue.add(key);
        }
        let first = {
            let mut batch = queue.batch();
            batch.refill(Instant::now(), 3, 0);
            let first = batch.next(Instant::now(), 3, 0).expect("a key");
            batch.finish(first.key, Duration::ZERO);
            first.key
        };
        let stats = queue.stats();
        assert_eq!((stats.in_flight, stats.ready), (0, 2), "{stats:?}");
        assert_eq!(first, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_given_back_keep_their_order_ahead_of_later_ones() {
        let queue = WorkQueue::new();
        for key in 0..5u32 {
            queue.add(key);
        }
        let mut batch = queue.batch();
        batch.refill(Instant::now(), 3, 0);
        assert_eq!(batch.unstarted().count(), 3);
        queue.add(5);
        batch.release();
        let mut order = Vec::new();
        while let Some(key) = timeout(LIMIT, queue.get()).await.ok().flatten() {
            order.push(key);
            queue.done(&key).expect("held");
            if order.len() == 6 {
                break;
            }
        }
        assert_eq!(order, [0, 1, 2, 3, 4, 5]);
    }

    /// Counts `queued_for` reports.
    #[derive(Default)]
    struct Waits(std::sync::atomic::AtomicUsize);

    impl crate::QueueObserver for Waits {
        fn queued_for(&self, _waited: Duration) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn time_in_queue_is_reported_once_per_key_started_even_if_handed_back() {
        let waits = std::sync::Arc::new(Waits::default());
        let queue = WorkQueue::builder().observer(waits.clone()).build();
        for key in 0..3u32 {
            queue.add(key);
        }
        let mut batch = queue.batch();
        batch.refill(Instant::now(), 3, 0);
        assert_eq!(batch.unstarted().count(), 3);
        // The first starts; the two others go back and are taken again.
        let _first = batch.next(Instant::now(), 3, 0).expect("taken");
        batch.release();
        for _ in 0..2 {
            timeout(LIMIT, queue.get())
                .await
                .expect("a key")
                .expect("open");
        }
        assert_eq!(waits.0.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
