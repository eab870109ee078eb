//! The memory backend: revisions, optimistic concurrency, generations,
//! history, compaction, bookmarks and fault injection.

mod support;

use std::num::NonZeroUsize;
use std::time::Duration;

use futures::StreamExt;
use tend::client::ClientError;
use tend::memory::{FaultError, Faults, InjectedFault, MemoryStore};
use tend::{Change, Revision, Source, SourceError, WatchStream};

use support::{Pod, within};

const STEP: Duration = Duration::from_secs(5);

fn store() -> MemoryStore<Pod> {
    MemoryStore::new("pods")
}

/// Reads `n` items from a watch, failing the test if they do not come.
async fn take(stream: &mut WatchStream<Pod>, n: usize) -> Vec<Result<Change<Pod>, SourceError>> {
    let mut items = Vec::new();
    for _ in 0..n {
        let item = within("a watch item", STEP, stream.next()).await;
        items.push(item.expect("watch ended early"));
    }
    items
}

/// A compact description of a change: `+name@rev`, `-name@rev`, `#rev`.
fn describe(change: &Change<Pod>) -> String {
    match change {
        Change::Applied(pod) => format!("+{}@{}", pod.name, pod.version),
        Change::Deleted { key, revision } => format!("-{key}@{revision}"),
        Change::Bookmark(revision) => format!("#{revision}"),
    }
}

fn describe_all(items: &[Result<Change<Pod>, SourceError>]) -> Vec<String> {
    items
        .iter()
        .map(|item| describe(item.as_ref().expect("unexpected watch error")))
        .collect()
}

#[tokio::test]
async fn writes_get_increasing_revisions_and_versions() {
    let store = store();
    let a = store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let b = store.client().create(Pod::new("b", "x", 1)).await.unwrap();
    assert_eq!((a.version, b.version), (Revision::new(1), Revision::new(2)));
    let mut a2 = a;
    a2.status = 7;
    let a2 = store.client().update(a2).await.unwrap();
    assert_eq!(a2.version, Revision::new(3));
    let deleted = store.client().delete(&"b".to_string()).await.unwrap();
    assert_eq!(deleted, Revision::new(4), "delete returns its revision");
    assert_eq!(store.revision(), Revision::new(4));
    assert_eq!(store.len(), 1);
    assert_eq!(store.get(&"a".to_string()), Some(a2));
}

#[tokio::test]
async fn an_update_naming_a_stale_version_fails_and_changes_nothing() {
    let store = store();
    let stored = store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let mut fresh = stored.clone();
    fresh.status = 1;
    store.client().update(fresh).await.unwrap();
    let before = (store.revision(), store.get(&"a".to_string()));

    let mut stale = stored;
    stale.status = 2;
    let error = store.client().update(stale).await.unwrap_err();
    assert!(
        matches!(
            &error,
            ClientError::Conflict { key, expected, actual }
                if key == "\"a\"" && *expected == Revision::new(1) && *actual == Revision::new(2)
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "version conflict on object \"a\": expected version 1, stored version is 2"
    );
    assert_eq!((store.revision(), store.get(&"a".to_string())), before);
}

#[tokio::test]
async fn a_delete_naming_a_stale_version_fails_and_changes_nothing() {
    let store = store();
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let error = store
        .client()
        .delete_at(&"a".to_string(), Revision::new(9))
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Conflict { .. }), "{error}");
    assert_eq!(store.len(), 1);
    assert_eq!(store.revision(), Revision::new(1));
    store
        .client()
        .delete_at(&"a".to_string(), Revision::new(1))
        .await
        .unwrap();
    assert!(store.is_empty());
}

#[tokio::test]
async fn writes_to_missing_or_taken_keys_fail_with_typed_errors() {
    let store = store();
    let missing = "nope".to_string();
    assert!(matches!(
        store.client().update(Pod::new("nope", "x", 1)).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        store.client().delete(&missing).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        store.client().delete_at(&missing, Revision::new(1)).await,
        Err(ClientError::NotFound { .. })
    ));
    store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    let error = store
        .client()
        .create(Pod::new("a", "y", 2))
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "object \"a\" already exists");
    assert_eq!(
        store.revision(),
        Revision::new(1),
        "failed writes take no revision"
    );
}

#[tokio::test]
async fn generation_moves_only_when_the_spec_changes() {
    let store = store();
    let pod = store.client().create(Pod::new("a", "x", 1)).await.unwrap();
    assert_eq!(pod.generation, 1);
    let mut status_only = pod;
    status_only.status = 5;
    let pod = store.client().update(status_only).await.unwrap();
    assert_eq!(pod.generation, 1, "status change keeps the generation");
    let mut spec = pod;
    spec.spec = 2;
    let pod = store.client().update(spec).await.unwrap();
    assert_eq!(pod.generation, 2, "spec change bumps the generation");
    let mut put = pod;
    put.spec = 3;
    put.version = Revision::ZERO;
    assert_eq!(store.put(put).generation, 3, "put bumps it too");
}

#[tokio::test(start_paused = true)]
async fn list_returns_every_object_at_the_current_revision_and_is_counted() {
    let store = store();
    for name in ["a", "b", "c"] {
        store.client().create(Pod::new(name, "x", 1)).await.unwrap();
    }
    let snapshot = store.list().await.unwrap();
    assert_eq!(snapshot.revision, Revision::new(3));
    let mut names: Vec<_> = snapshot
        .objects
        .iter()
        .map(|pod| pod.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    let _watch = store.watch(snapshot.revision).await.unwrap();
    let stats = store.stats();
    assert_eq!((stats.lists, stats.watches), (1, 1));
    assert_eq!(store.name(), "pods");
}

#[tokio::test(start_paused = true)]
async fn failing_lists_fail_with_an_injected_fault_then_recover() {
    let store = store();
    store.fail_next_lists(2);
    for _ in 0..2 {
        let error = store.list().await.unwrap_err();
        assert!(!error.is_expired());
        let cause =
            std::error::Error::source(&error).and_then(|e| e.downcast_ref::<InjectedFault>());
        assert_eq!(cause, Some(&InjectedFault::List));
        assert_eq!(error.to_string(), "source unavailable");
    }
    assert!(store.list().await.is_ok());
    assert_eq!(store.stats().lists, 3);
}

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

/// Opens a watch from zero with `faults` on 200 writes and describes what it
/// delivers until it catches up.
async fn faulty_delivery(faults: Faults) -> Vec<String> {
    let store = store();
    store.set_faults(faults).unwrap();
    for i in 0..200 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let mut stream = store.watch(Revision::ZERO).await.unwrap();
    store.bookmark();
    let mut seen = Vec::new();
    loop {
        let item = within("a watch item", STEP, stream.next())
            .await
            .unwrap()
            .unwrap();
        if let Change::Bookmark(_) = item {
            return seen;
        }
        seen.push(describe(&item));
    }
}

#[tokio::test(start_paused = true)]
async fn faults_are_reproducible_from_the_seed() {
    let faults = |seed| Faults {
        seed,
        drop: 0.3,
        duplicate: 0.1,
        reorder: 0.1,
        cut_after: None,
        delay: None,
    };
    let first = faulty_delivery(faults(42)).await;
    assert_eq!(
        first,
        faulty_delivery(faults(42)).await,
        "same seed, same faults"
    );
    assert_ne!(
        first,
        faulty_delivery(faults(43)).await,
        "another seed, other faults"
    );

    let revisions: Vec<u64> = first
        .iter()
        .map(|change| change.rsplit('@').next().unwrap().parse().unwrap())
        .collect();
    let mut unique = revisions.clone();
    unique.sort_unstable();
    unique.dedup();
    assert!(
        unique.len() < 170,
        "about 30 % dropped, got {} of 200",
        unique.len()
    );
    assert!(revisions.len() > unique.len(), "some duplicated");
    assert!(
        revisions.windows(2).any(|pair| pair[1] < pair[0]),
        "some reordered"
    );
}

#[tokio::test(start_paused = true)]
async fn drop_everything_and_duplicate_everything() {
    let all_dropped = faulty_delivery(Faults {
        drop: 1.0,
        ..Faults::default()
    })
    .await;
    assert!(all_dropped.is_empty());
    let doubled = faulty_delivery(Faults {
        duplicate: 1.0,
        ..Faults::default()
    })
    .await;
    assert_eq!(doubled.len(), 400);
    assert_eq!(doubled[0], doubled[1]);
}

#[test]
fn fault_probabilities_outside_zero_to_one_are_refused() {
    let store = store();
    for (faults, name) in [
        (
            Faults {
                drop: 1.5,
                ..Faults::default()
            },
            "drop",
        ),
        (
            Faults {
                duplicate: -0.1,
                ..Faults::default()
            },
            "duplicate",
        ),
        (
            Faults {
                reorder: f64::NAN,
                ..Faults::default()
            },
            "reorder",
        ),
    ] {
        let error = store.set_faults(faults).unwrap_err();
        let FaultError::InvalidProbability { name: field, .. } = &error else {
            panic!("unexpected error {error}");
        };
        assert_eq!(*field, name);
        assert!(
            error
                .to_string()
                .starts_with(&format!("fault probability `{name}` must be within 0..=1"))
        );
    }
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

/// Seeding without a runtime: `create` checks what a client's create
/// checks (the key must be free), unlike `put`, which replaces.
#[test]
fn create_seeds_without_a_runtime_and_refuses_an_existing_key() {
    let store = store();
    let stored = store
        .create(Pod::new("web-1", "web", 1))
        .expect("a free key");
    assert_eq!(stored.version, store.revision());
    let again = store.create(Pod::new("web-1", "web", 2));
    assert!(
        matches!(&again, Err(error) if error.is_already_exists()),
        "{again:?}"
    );
    assert_eq!(
        store.get(&"web-1".to_owned()).map(|p| p.spec),
        Some(1),
        "nothing replaced"
    );
    store.put(Pod::new("web-1", "web", 3));
    assert_eq!(
        store.get(&"web-1".to_owned()).map(|p| p.spec),
        Some(3),
        "put replaces"
    );
}

/// Inside a runtime too: the memory client's calls complete at once.
#[tokio::test]
async fn create_seeds_inside_a_runtime() {
    let store = store();
    store
        .create(Pod::new("web-1", "web", 1))
        .expect("a free key");
    let listed = store.client().list().await.expect("listed");
    assert_eq!(listed.objects.len(), 1);
}
