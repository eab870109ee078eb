//! Key groups: fair turns within a level, priorities across levels.

use super::*;

/// A queue of `"tenant/name"` keys grouped by tenant.
fn by_tenant() -> WorkQueue<&'static str> {
    WorkQueue::builder()
        .group_by(|key: &&str| key.split('/').next().unwrap_or_default().to_owned())
        .build()
}

async fn take(queue: &WorkQueue<&'static str>, count: usize) -> Vec<&'static str> {
    let mut order = Vec::new();
    for _ in 0..count {
        let key = next(queue).await;
        queue.done(&key).expect("in flight");
        order.push(key);
    }
    order
}

#[tokio::test(start_paused = true)]
async fn groups_take_turns_each_in_its_own_order() {
    let queue = by_tenant();
    for key in ["a/1", "a/2", "a/3", "a/4", "b/1", "b/2", "c/1"] {
        queue.add(key);
    }
    queue.add("a/1"); // deduplicated, keeps its place
    assert_eq!(queue.len(), 7);
    assert_eq!(
        (queue.ready_in_group("a"), queue.ready_in_group("c")),
        (4, 1)
    );
    assert_eq!(queue.ready_in_group("nobody"), 0);
    let order = take(&queue, 7).await;
    assert_eq!(order, ["a/1", "b/1", "c/1", "a/2", "b/2", "a/3", "a/4"]);
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_goes_first_whatever_its_group() {
    let queue = by_tenant();
    for key in ["a/1", "a/2", "b/1"] {
        queue.add_prioritized(key, Priority::LOW);
    }
    queue.add_prioritized("a/3", Priority::HIGH);
    queue.add_prioritized("b/1", Priority::HIGH); // raised: leaves its low turn
    let order = take(&queue, 4).await;
    assert_eq!(order, ["a/3", "b/1", "a/1", "a/2"]);
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_group_function_panics_is_still_served() {
    let queue: WorkQueue<&'static str> = WorkQueue::builder()
        .group_by(|key: &&str| {
            assert!(*key != "bad", "no group for {key}");
            key.len()
        })
        .build();
    queue.add("bad");
    queue.add("ok");
    let mut order = take(&queue, 2).await;
    order.sort_unstable();
    assert_eq!(order, ["bad", "ok"]);
    assert!(queue.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_group_function_that_changes_its_answers_loses_no_key() {
    // Its answers change, as a tenant table reloaded between adds would.
    let epoch = Arc::new(AtomicU64::new(0));
    let queue: WorkQueue<u64> = WorkQueue::builder()
        .group_by({
            let epoch = Arc::clone(&epoch);
            move |key: &u64| (key + epoch.load(Ordering::Relaxed)) % 3
        })
        .build();
    for key in 0..30 {
        queue.add_prioritized(key, Priority::LOW);
    }
    epoch.store(1, Ordering::Relaxed); // each key now names its neighbour's group
    for key in (0..30).step_by(3) {
        queue.add_prioritized(key, Priority::HIGH); // moves: its old entry goes stale
    }
    let mut served = Vec::new();
    for _ in 0..30 {
        let key = next(&queue).await;
        queue.done(&key).expect("in flight");
        served.push(key);
    }
    served.sort_unstable();
    assert_eq!(served, (0..30).collect::<Vec<_>>());
    assert!(queue.is_empty(), "nothing left queued: {}", queue.len());
}

#[tokio::test(start_paused = true)]
async fn without_a_group_function_no_group_counts() {
    let queue = WorkQueue::new();
    queue.add("a/1");
    assert_eq!(queue.ready_in_group("a"), 0);
    assert_eq!(queue.len(), 1);
}
