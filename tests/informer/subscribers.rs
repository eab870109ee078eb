//! Subscribers that join late or during live traffic.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_late_subscriber_gets_the_cache_as_initial_then_live_events() {
    let store = MemoryStore::new("pods");
    for i in 0..50 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    let (recorder, subscription) = Recorder::subscribe(&informer);
    assert!(subscription.is_synced());
    within(
        "the late subscription",
        STEP,
        subscription.wait_synced(STEP),
    )
    .await
    .unwrap();
    let replay = recorder.take();
    assert_eq!(replay.len(), 50, "replayed inside subscribe");
    assert!(
        replay
            .iter()
            .all(|event| matches!(event, Seen::Initial(..)))
    );

    touch(&store, "p7").await;
    wait_until("the live event", STEP, || recorder.len() == 1).await;
    assert_eq!(
        recorder.take(),
        [Seen::Applied {
            key: key("p7"),
            old: Some(8),
            new: 51
        }]
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_added_during_live_traffic_sees_every_change_exactly_once() {
    let store = MemoryStore::new("pods");
    for i in 0..500 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    let writer = tokio::spawn({
        let store = store.clone();
        async move {
            let mut rng = fastrand::Rng::with_seed(3);
            for round in 0..20_000 {
                let name = format!("p{}", rng.usize(0..600));
                match store.get(&name) {
                    Some(_) if round % 7 == 0 => drop(store.client().delete(&name).await),
                    Some(_) => drop(touch(&store, &name).await),
                    None => drop(store.client().create(Pod::new(name, "x", 1)).await),
                }
                if round % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    let (mirror, _subscription) = Mirror::subscribe(&informer);
    within("the writer", Duration::from_secs(60), writer)
        .await
        .unwrap();
    let target = store.revision();
    wait_until("the informer catches up", Duration::from_secs(30), || {
        informer.stats().revision == target
    })
    .await;

    assert_eq!(mirror.anomalies(), Vec::<String>::new());
    assert_same(
        "late subscriber's view vs cache",
        &mirror.snapshot(),
        &cache_versions(&informer),
    );
    assert_cache_matches(&informer, &store);
    running.stop().await;
}
