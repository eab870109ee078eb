//! Writes, versions, generations and lists.

use super::*;

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
