//! Priorities and aging.

use super::*;

#[tokio::test(start_paused = true)]
async fn higher_priorities_first_and_fifo_within_a_level() {
    let queue = WorkQueue::new();
    queue.add_prioritized("low-1", Priority::LOW);
    queue.add("normal-1");
    queue.add_prioritized("high-1", Priority::HIGH);
    queue.add_prioritized("low-2", Priority::LOW);
    queue.add("normal-2");
    queue.add_prioritized("high-2", Priority::HIGH);
    let mut order = Vec::new();
    for _ in 0..6 {
        order.push(next(&queue).await);
    }
    assert_eq!(
        order,
        ["high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_re_add_keeps_the_higher_priority() {
    let queue = WorkQueue::new();
    queue.add_prioritized("raised", Priority::LOW);
    queue.add("normal");
    queue.add_prioritized("raised", Priority::HIGH);
    queue.add_prioritized("kept", Priority::HIGH);
    queue.add_prioritized("kept", Priority::LOW);
    assert_eq!(queue.len(), 3);
    assert_eq!(next(&queue).await, "raised");
    assert_eq!(next(&queue).await, "kept");
    assert_eq!(next(&queue).await, "normal");
}

#[tokio::test(start_paused = true)]
async fn low_priority_keys_are_served_under_a_constant_high_priority_stream() {
    let queue = WorkQueue::builder()
        .max_wait(Duration::from_secs(1))
        .build();
    for i in 0..50u32 {
        queue.add_prioritized(1_000_000 + i, Priority::LOW);
    }
    let mut low_served = 0;
    let mut fresh = 0u32;
    // Two fresh changes arrive for every key served: the high level never empties.
    for _ in 0..2_000 {
        queue.add(fresh);
        queue.add(fresh + 1);
        fresh += 2;
        let key = next(&queue).await;
        if key >= 1_000_000 {
            low_served += 1;
        }
        queue.done(&key).expect("held");
        advance(Duration::from_millis(10)).await;
    }
    assert_eq!(low_served, 50, "every low-priority key must be served");
}

#[tokio::test(start_paused = true)]
async fn aging_never_takes_more_than_half_the_throughput() {
    let queue = WorkQueue::builder().max_wait(Duration::ZERO).build();
    for i in 0..100u32 {
        queue.add_prioritized(1_000 + i, Priority::LOW);
        queue.add(i);
    }
    let mut fresh_in_first_20 = 0;
    for _ in 0..20 {
        if next(&queue).await < 1_000 {
            fresh_in_first_20 += 1;
        }
    }
    assert_eq!(fresh_in_first_20, 10);
}
