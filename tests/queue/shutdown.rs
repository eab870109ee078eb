//! Shutdown and drain.

use super::*;

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiting_worker_and_drops_queued_keys() {
    let queue = WorkQueue::<u32>::new();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    queue.shutdown();
    for worker in workers {
        let got = timeout(Duration::from_secs(1), worker)
            .await
            .expect("a waiting worker was not woken by shutdown")
            .expect("worker");
        assert_eq!(got, None);
    }

    let queue = WorkQueue::new();
    queue.add(1);
    queue.add(2);
    queue.add_after(3, Duration::from_secs(5));
    queue.shutdown();
    assert_eq!(queue.stats().dropped, 3);
    assert_eq!(queue.get().await, None);
    queue.add(4);
    assert_eq!(queue.len(), 0, "adds after shutdown are ignored");
    assert!(queue.is_shut_down());
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_waits_for_in_flight_keys() {
    let queue = WorkQueue::new();
    queue.add("a");
    queue.add("b");
    let key = next(&queue).await;
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move {
            let start = Instant::now();
            queue.shutdown_with_drain().await;
            start.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!drain.is_finished(), "drain returned with a key in flight");
    assert_eq!(queue.get().await, None, "workers see None at once");
    queue.done(&key).expect("done is allowed during drain");
    let waited = timeout(Duration::from_secs(1), drain)
        .await
        .expect("drain did not return after the last done")
        .expect("drain task");
    assert_eq!(waited, Duration::from_secs(3));
    assert_eq!(queue.stats().dropped, 1, "b was queued and is dropped");
}

#[tokio::test(start_paused = true)]
async fn a_later_shutdown_cuts_a_drain_short() {
    let queue = WorkQueue::new();
    queue.add("stuck");
    let _held = next(&queue).await;
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shutdown_with_drain().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!drain.is_finished());
    queue.shutdown();
    timeout(Duration::from_secs(1), drain)
        .await
        .expect("a later shutdown must end the drain")
        .expect("drain task");
}

#[tokio::test(start_paused = true)]
async fn a_drain_after_a_shutdown_still_waits_for_in_flight_keys() {
    let queue = WorkQueue::new();
    queue.add("a");
    let key = next(&queue).await;
    queue.shutdown();
    let drains: Vec<_> = (0..2)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.shutdown_with_drain().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        drains.iter().all(|d| !d.is_finished()),
        "a drain returned early"
    );
    queue.done(&key).expect("held");
    for drain in drains {
        timeout(Duration::from_secs(1), drain)
            .await
            .expect("the drain did not end after the last done")
            .expect("drain task");
    }
}
