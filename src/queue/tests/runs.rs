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
