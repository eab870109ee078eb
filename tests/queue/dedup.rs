//! Deduplication of queued and in-flight keys.

use super::*;

#[tokio::test(start_paused = true)]
async fn adding_a_queued_key_again_keeps_it_once() {
    let queue = WorkQueue::new();
    queue.add("a");
    queue.add("b");
    queue.add("a");
    assert_eq!(queue.len(), 2);
    assert_eq!(next(&queue).await, "a");
    assert_eq!(next(&queue).await, "b");
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_key_added_while_processed_is_queued_again_after_done() {
    let queue = WorkQueue::new();
    queue.add("a");
    let key = next(&queue).await;
    queue.add("a");
    queue.add("a");
    // Never to a second worker while the first holds it.
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
    assert_eq!(queue.stats().in_flight, 1);
    queue.done(&key).expect("held");
    assert_eq!(next(&queue).await, "a");
    queue.done(&"a").expect("held");
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn done_for_a_key_not_held_is_an_error() {
    let queue = WorkQueue::<&str>::new();
    let err = queue.done(&"ghost").expect_err("not held");
    assert_eq!(err.to_string(), "key \"ghost\" is not being processed");
    queue.add("a");
    let key = next(&queue).await;
    queue.done(&key).expect("held");
    assert!(queue.done(&key).is_err(), "done twice must fail");
}
