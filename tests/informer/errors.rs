//! Syncs that never come and lists that fail.

use super::*;

#[tokio::test(start_paused = true)]
async fn waiting_for_a_sync_that_never_comes_fails_naming_the_source() {
    let store = seeded(&["a"]);
    store.fail_next_lists(u32::MAX);
    let informer = informer(&store);
    let (_recorder, subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);

    let expected = InformerError::SyncTimeout {
        source_name: "pods".into(),
        timeout: Duration::from_secs(3),
    };
    let timeout = Duration::from_secs(3);
    assert_eq!(informer.wait_synced(timeout).await, Err(expected.clone()));
    assert_eq!(
        informer.cache().wait_synced(timeout).await,
        Err(expected.clone())
    );
    assert_eq!(
        subscription.wait_synced(timeout).await,
        Err(expected.clone())
    );
    assert_eq!(
        expected.to_string(),
        "informer for source `pods` did not sync within 3s"
    );
    assert!(informer.stats().lists >= 2, "lists are retried");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failed_lists_back_off_exponentially_then_recover() {
    let store = seeded(&["a"]);
    store.fail_next_lists(3);
    let informer = informer(&store);
    let start = Instant::now();
    let running = Running::start(&informer);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        store.stats().lists,
        1,
        "no retry before the first backoff (800 ms ± 20 %)"
    );

    within(
        "sync after three failures",
        Duration::from_secs(30),
        informer.wait_synced(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let elapsed = start.elapsed();
    // 0.8 + 1.6 + 3.2 s, each ± 20 %.
    assert!(
        elapsed >= Duration::from_millis(4_480) && elapsed <= Duration::from_millis(6_720),
        "synced after {elapsed:?}"
    );
    assert_eq!(informer.stats().lists, 4);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_backoff_without_a_maximum_waits_instead_of_panicking_on_the_first_failed_list() {
    let store = seeded(&["a"]);
    store.fail_next_lists(1);
    let informer = Informer::builder(store.clone())
        .backoff(Duration::MAX, Duration::MAX, Duration::MAX)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(store.stats().lists, 1, "the retry is (practically) never");
    assert!(!informer.is_synced());
    running.stop().await;
}
