//! Initial sync, live changes, bookmarks and relists after compaction.

use super::*;

#[tokio::test(start_paused = true)]
async fn initial_sync_caches_every_object_and_delivers_initial_events() {
    let store = MemoryStore::new("pods");
    for i in 0..100 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let (recorder, subscription) = Recorder::subscribe(&informer);
    assert!(!informer.is_synced() && !subscription.is_synced());
    let running = Running::start(&informer);

    within("sync", STEP, subscription.wait_synced(STEP))
        .await
        .unwrap();
    assert_cache_matches(&informer, &store);
    let seen = recorder.take();
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|event| matches!(event, Seen::Initial(..))));
    let stats = informer.stats();
    assert_eq!((stats.lists, stats.relists, stats.cache_size), (1, 0, 100));
    assert_eq!(stats.revision, Revision::new(100));
    assert_eq!(informer.name(), "pods");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn live_creates_updates_and_deletes_reach_the_cache_and_subscribers() {
    let store = seeded(&["a", "b"]);
    let informer = informer(&store);
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    touch(&store, "a").await;
    store.client().delete(&key("b")).await.unwrap();
    wait_until("three changes applied", STEP, || {
        informer.stats().events_applied == 3
    })
    .await;

    assert_eq!(
        recorder.take(),
        [
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 3
            },
            Seen::Applied {
                key: key("a"),
                old: Some(1),
                new: 4
            },
            Seen::Deleted(key("b"), 2),
        ]
    );
    assert_cache_matches(&informer, &store);
    assert_eq!(informer.cache().get(&key("a")).unwrap().status, 1);
    assert!(informer.cache().get(&key("b")).is_none());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_revision() {
    let store = seeded(&["a"]);
    // Every watch event is lost: only the bookmark tells the informer where
    // the source is.
    store
        .set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    store
        .client()
        .create(Pod::new("lost", "x", 1))
        .await
        .unwrap();
    store.bookmark();
    wait_until("the bookmark's revision", STEP, || {
        informer.stats().revision == Revision::new(2)
    })
    .await;
    assert!(
        informer.cache().get(&key("lost")).is_none(),
        "dropped events stay lost until a relist"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_after_compaction_emits_the_missed_deletes_and_updates() {
    let store = seeded(&["a", "b", "d"]);
    let informer = informer(&store);
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    // Made and compacted away before the informer's task runs again.
    touch(&store, "a").await;
    store.client().delete(&key("b")).await.unwrap();
    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    store.compact();
    wait_until("the relist", STEP, || informer.stats().relists == 1).await;
    wait_until("three events", STEP, || recorder.len() == 3).await;

    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(
        seen,
        [
            Seen::Applied {
                key: key("a"),
                old: Some(1),
                new: 4
            },
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 6
            },
            Seen::Deleted(key("b"), 2),
        ],
        "the unchanged `d` produces nothing"
    );
    assert_cache_matches(&informer, &store);
    assert_eq!(store.stats().lists, 2);
    running.stop().await;
}
