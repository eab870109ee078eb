//! Watches: order, compaction, bookmarks, cuts and wake-ups.

use super::*;

#[tokio::test(start_paused = true)]
async fn watch_delivers_every_change_after_the_revision_in_order() {
    let store = store();
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let from = store.revision();
    store.client().create(Pod::new("b", "x", 1)).await.unwrap();
    let mut stream = store.watch(from).await.unwrap();
    let mut a = store.get(&"a".to_string()).unwrap();
    a.status = 1;
    store.client().update(a).await.unwrap();
    store.client().delete(&"b".to_string()).await.unwrap();
    let items = take(&mut stream, 3).await;
    assert_eq!(describe_all(&items), ["+b@2", "+a@3", "-b@4"]);
    // Live: a write made while the stream waits wakes it.
    let later = tokio::spawn({
        let store = store.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            store.client().create(Pod::new("c", "x", 1)).await.unwrap();
        }
    });
    assert_eq!(describe_all(&take(&mut stream, 1).await), ["+c@5"]);
    later.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn watch_from_a_compacted_revision_is_expired() {
    let store = store();
    for name in ["a", "b", "c"] {
        store.client().create(Pod::new(name, "x", 1)).await.unwrap();
    }
    store.compact_to(Revision::new(2));
    assert_eq!(store.compacted(), Revision::new(2));
    let error = store
        .watch(Revision::new(1))
        .await
        .err()
        .expect("expected expiry");
    assert!(error.is_expired());
    assert_eq!(
        error.to_string(),
        "revision 1 has expired (history starts after 2): relist"
    );
    let mut stream = store.watch(Revision::new(2)).await.unwrap();
    assert_eq!(describe_all(&take(&mut stream, 1).await), ["+c@3"]);
}

#[tokio::test(start_paused = true)]
async fn a_watcher_left_behind_by_compaction_gets_expired_then_the_end() {
    let store = store();
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    store.client().create(Pod::new("b", "x", 1)).await.unwrap();
    store.compact();
    let item = within("the expiry", STEP, stream.next()).await.unwrap();
    assert!(item.unwrap_err().is_expired());
    assert!(within("the end", STEP, stream.next()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn the_history_window_is_bounded() {
    let store = MemoryStore::with_history("pods", NonZeroUsize::new(3).unwrap());
    for i in 0..10 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    assert_eq!(store.compacted(), Revision::new(7));
    assert!(store.watch(Revision::new(6)).await.is_err());
    let mut stream = store.watch(Revision::new(7)).await.unwrap();
    assert_eq!(
        describe_all(&take(&mut stream, 3).await),
        ["+p7@8", "+p8@9", "+p9@10"]
    );
}

#[tokio::test(start_paused = true)]
async fn bookmarks_reach_watchers_that_caught_up() {
    let store = store();
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    store.bookmark();
    assert_eq!(describe_all(&take(&mut stream, 2).await), ["+a@1", "#1"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_is_cut_after_n_events() {
    let store = store();
    store
        .set_faults(Faults {
            cut_after: NonZeroUsize::new(2),
            ..Faults::default()
        })
        .unwrap();
    for i in 0..5 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    let items = take(&mut stream, 3).await;
    assert_eq!(describe_all(&items[..2]), ["+p0@1", "+p1@2"]);
    let error = items[2].as_ref().unwrap_err();
    let cause = std::error::Error::source(error).and_then(|e| e.downcast_ref::<InjectedFault>());
    assert_eq!(cause, Some(&InjectedFault::WatchCut { events: 2 }));
    assert!(within("the end", STEP, stream.next()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_held_back_change_is_delivered_before_the_bookmark_that_covers_it() {
    let store = store();
    store
        .set_faults(Faults {
            seed: 1,
            reorder: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    store.bookmark();
    let items = take(&mut stream, 2).await;
    assert_eq!(describe_all(&items), ["+a@1", "#1"]);
}

/// A write from another thread racing a watcher that is about to sleep must
/// still wake it: the lost-wake-up race of the store's bell, tried many times
/// on real threads (a lost wake-up fails the `take` bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_watcher_going_to_sleep_always_wake_it() {
    let store = store();
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    for round in 0..2_000u64 {
        let writer = store.clone();
        let write = std::thread::spawn(move || {
            // Spread the write over the watcher's look-then-sleep window.
            for _ in 0..round % 64 {
                std::hint::spin_loop();
            }
            writer.put(Pod::new("racer", "rs", round));
        });
        let got = take(&mut stream, 1).await;
        write.join().expect("writer");
        assert!(
            matches!(&got[0], Ok(Change::Applied(pod)) if pod.spec == round),
            "round {round}: {:?}",
            describe_all(&got)
        );
    }
}
