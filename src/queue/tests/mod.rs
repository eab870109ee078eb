//! Unit and property tests of the synchronous core, with explicit time.

use std::sync::Arc;
use std::time::Duration;

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
fn memory_is_given_back_after_a_burst_drains_with_groups() {
    let t0 = Stamp::default();
    // Each key its own group (the most groups there can be), then a few.
    let groups: [fn(&u32) -> u64; 2] = [|key| u64::from(*key), |key| u64::from(key % 7)];
    for group in groups {
        let mut core = Core::new(HOUR).with_groups(Arc::new(group));
        burst(&mut core, 100_000, false, t0);
        let (_, ready, _) = core.capacities();
        // The entries, the slab, its index and the ring: each keeps at most
        // its floor (1024) when empty.
        assert!(
            ready <= 4096,
            "ready capacity after draining 100k keys: {ready}"
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
    let by_five = |key: &u8| u64::from(key % 5);
    for groups in [None, Some(by_five)] {
        let mut core = Core::new(HOUR);
        if let Some(group) = groups {
            core = core.with_groups(Arc::new(group));
        }
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
        // Every key still comes out in order (with groups, the groups in turn).
        let firsts: Vec<u8> = (0..5).filter_map(|_| take(&mut core, t0)).collect();
        assert_eq!(firsts, [0, 1, 2, 3, 4]);
    }
}

#[test]
fn a_key_handed_back_gets_its_groups_turn_back() {
    let mut core = Core::new(HOUR).with_groups(Arc::new(|key: &u8| u64::from(key % 2)));
    let t0 = Stamp::default();
    for key in [0, 2, 1, 3] {
        core.add(key, Priority::NORMAL, NONE, || t0);
    }
    let (handed, _) = take_next(&mut core, t0);
    assert_eq!(handed.key, 0);
    assert_eq!(core.restore(handed), Restored::Ready);
    let order: Vec<u8> = (0..4)
        .filter_map(|_| take_with_payload(&mut core, t0).map(|(key, _)| key))
        .collect();
    assert_eq!(order, [0, 1, 2, 3]);
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
mod bound;
mod checked;
mod model;
mod runs;
mod turns;
