//! Duplicates, reordering, the transform and indexes.

use super::*;

#[tokio::test(start_paused = true)]
async fn duplicated_and_reordered_changes_are_ignored_and_counted() {
    let store = seeded(&["a", "b", "c"]);
    store
        .set_faults(Faults {
            seed: 5,
            duplicate: 1.0,
            reorder: 0.4,
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let (mirror, _subscription) = Mirror::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    for round in 0..60 {
        touch(&store, ["a", "b", "c"][round % 3]).await;
        if round % 10 == 0 {
            store.client().delete(&key("c")).await.unwrap();
            store.client().create(Pod::new("c", "x", 1)).await.unwrap();
        }
    }
    let target = store.revision();
    wait_until("the informer catches up", STEP, || {
        informer.stats().revision == target
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    assert_cache_matches(&informer, &store);
    assert!(
        informer.stats().stale_ignored >= 30,
        "{:?}",
        informer.stats()
    );
    assert_eq!(mirror.anomalies(), Vec::<String>::new(), "no regressions");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_transform_runs_before_caching() {
    let store = MemoryStore::new("pods");
    let mut pod = Pod::new("a", "x", 1);
    pod.status = 42;
    store.client().create(pod).await.unwrap();
    let informer = Informer::builder(store.clone())
        .transform(|mut pod: Pod| {
            pod.status = 0;
            pod
        })
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    assert_eq!(informer.cache().get(&key("a")).unwrap().status, 0);

    let mut pod = store.get(&key("a")).unwrap();
    pod.status = 43;
    store.client().update(pod).await.unwrap();
    wait_until("the update", STEP, || informer.stats().events_applied == 1).await;
    let cached = informer.cache().get(&key("a")).unwrap();
    assert_eq!((cached.status, cached.version), (0, Revision::new(2)));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn indexes_follow_creates_updates_and_deletes() {
    let store = MemoryStore::new("pods");
    for (name, owner) in [("a", "rs1"), ("b", "rs1"), ("c", "rs2")] {
        store
            .client()
            .create(Pod::new(name, owner, 1))
            .await
            .unwrap();
    }
    let informer = Informer::builder(store.clone())
        .index("by_owner", by_owner)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    let cache = informer.cache();
    let names = |owner: &str| {
        let mut names: Vec<String> = cache
            .by_index("by_owner", owner)
            .unwrap()
            .iter()
            .map(|pod| pod.name.clone())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names("rs1"), ["a", "b"]);

    let mut moved = store.get(&key("b")).unwrap();
    moved.owner = "rs2".into();
    store.client().update(moved).await.unwrap();
    store.client().delete(&key("a")).await.unwrap();
    wait_until("two changes", STEP, || informer.stats().events_applied == 2).await;
    assert_eq!(names("rs1"), Vec::<String>::new());
    assert_eq!(names("rs2"), ["b", "c"]);
    let mut keys = cache.keys_by_index("by_owner", "rs2").unwrap();
    keys.sort();
    assert_eq!(keys, ["b", "c"]);
    assert_eq!(cache.index_names(), ["by_owner"]);

    let error = cache.by_index("by_node", "n1").unwrap_err();
    assert_eq!(
        error,
        InformerError::UnknownIndex {
            source_name: "pods".into(),
            index: "by_node".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "informer for source `pods` has no index named `by_node`"
    );
    assert!(cache.keys_by_index("by_node", "n1").is_err());
    running.stop().await;
}
