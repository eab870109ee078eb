//! The resync and relist timers.

use super::*;

#[tokio::test(start_paused = true)]
async fn resync_redelivers_every_cached_object_on_its_cadence_without_calling_the_source() {
    let store = seeded(&["a", "b", "c"]);
    let informer = Informer::builder(store.clone())
        .resync_every(Duration::from_secs(10))
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let start = Instant::now();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    let resyncs = || recorder.count(|event| matches!(event, Seen::Resync(..)));

    // First round within 10 s ± 10 %, the second one 10 s ± 10 % later.
    tokio::time::sleep_until(start + Duration::from_millis(8_900)).await;
    assert_eq!(resyncs(), 0, "no resync before 9 s");
    tokio::time::sleep_until(start + Duration::from_millis(11_100)).await;
    assert_eq!(resyncs(), 3, "one round by 11 s");
    tokio::time::sleep_until(start + Duration::from_millis(17_900)).await;
    assert_eq!(resyncs(), 3, "no second round before 18 s");
    tokio::time::sleep_until(start + Duration::from_millis(22_300)).await;
    assert_eq!(resyncs(), 6, "a second round by 22 s");

    let stats = informer.stats();
    assert_eq!((stats.resyncs, stats.lists), (2, 1));
    assert_eq!(store.stats().lists, 1, "resync never calls the source");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_relist_timer_repairs_events_the_source_lost() {
    let store = seeded(&["a", "b"]);
    store
        .set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let informer = Informer::builder(store.clone())
        .relist_every(Duration::from_secs(60))
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let start = Instant::now();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    store.client().delete(&key("a")).await.unwrap();
    touch(&store, "b").await;
    tokio::time::sleep_until(start + Duration::from_secs(53)).await;
    assert_eq!(
        cache_versions(&informer).len(),
        2,
        "the lost events are not seen before the relist"
    );
    assert_eq!(recorder.len(), 0);

    tokio::time::sleep_until(start + Duration::from_secs(67)).await;
    assert_eq!(store.stats().lists, 2);
    assert_cache_matches(&informer, &store);
    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(
        seen,
        [
            Seen::Applied {
                key: key("b"),
                old: Some(2),
                new: 5
            },
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 3
            },
            Seen::Deleted(key("a"), 1),
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn duration_max_timers_never_fire() {
    let store = seeded(&["a"]);
    let informer = Informer::builder(store.clone())
        .resync_every(Duration::MAX)
        .relist_every(Duration::MAX)
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    // A day later, only the initial object was delivered.
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(recorder.len(), 1);
    touch(&store, "a").await;
    wait_until("the change", STEP, || recorder.len() == 2).await;
    assert_eq!(store.stats().lists, 1, "no relist");
    assert_eq!(informer.stats().resyncs, 0);
    running.stop().await;
}
