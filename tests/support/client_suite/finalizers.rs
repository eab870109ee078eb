//! The suite's finalizer checks.

use super::*;

pub async fn finalizers_on_a_type_without_them_are_invalid(client: Client<Item>) {
    client.create(item("a", 1)).await.unwrap();
    let error = client.add_finalizer(&key("a"), "f").await.unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    let error = client.remove_finalizer(&key("a"), "f").await.unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    client.delete(&key("a")).await.unwrap();
    assert_eq!(
        client.get(&key("a")).await.unwrap(),
        None,
        "deleted at once"
    );
}

pub async fn a_delete_with_finalizers_marks_and_the_last_removal_deletes(client: Client<Volume>) {
    let created = client.create(volume("v", &["a", "b"])).await.unwrap();
    let asked = std::time::SystemTime::now();
    let marked_at = client.delete(&key("v")).await.unwrap();
    assert!(marked_at > created.version, "the mark is a write");
    let marked = client.get(&key("v")).await.unwrap().expect("still stored");
    assert_eq!(marked.version, marked_at);
    assert_eq!(marked.lifecycle.finalizers(), ["a", "b"]);
    let deletion = marked.deletion().expect("marked");
    let slack = std::time::Duration::from_secs(60);
    assert!(deletion.at() + slack >= asked && deletion.at() <= asked + slack);
    // Deleting again writes nothing.
    assert_eq!(client.delete(&key("v")).await.unwrap(), marked_at);
    assert_eq!(client.get(&key("v")).await.unwrap(), Some(marked.clone()));
    let left = client.remove_finalizer(&key("v"), "a").await.unwrap();
    let left = left.expect("one finalizer left");
    assert_eq!(left.lifecycle.finalizers(), ["b"]);
    assert_eq!(left.deletion(), Some(deletion), "the mark stays");
    assert_eq!(client.remove_finalizer(&key("v"), "b").await.unwrap(), None);
    assert_eq!(client.get(&key("v")).await.unwrap(), None, "removed");
    assert_eq!(client.remove_finalizer(&key("v"), "b").await.unwrap(), None);
}

pub async fn no_finalizer_can_be_added_to_an_object_being_deleted(client: Client<Volume>) {
    client.create(volume("v", &["a"])).await.unwrap();
    client.delete(&key("v")).await.unwrap();
    let before = client.get(&key("v")).await.unwrap();
    let error = client.add_finalizer(&key("v"), "b").await.unwrap_err();
    assert!(
        matches!(error, ClientError::BeingDeleted { .. }),
        "{error:?}"
    );
    let mut forged = before.clone().unwrap();
    forged.lifecycle.add_finalizer("c");
    let error = client.update(forged).await.unwrap_err();
    assert!(
        matches!(error, ClientError::BeingDeleted { .. }),
        "{error:?}"
    );
    assert_eq!(
        client.get(&key("v")).await.unwrap(),
        before,
        "nothing written"
    );
    let again = client.add_finalizer(&key("v"), "a").await.unwrap();
    assert_eq!(
        again.effect,
        Effect::Unchanged,
        "a finalizer it has is fine"
    );
}

pub async fn the_deletion_mark_belongs_to_the_backend(client: Client<Volume>) {
    let mut forged = volume("v", &["a"]);
    forged.lifecycle.set_deletion(Some(Deletion::now()));
    let created = client.create(forged).await.unwrap();
    assert_eq!(created.deletion(), None, "a create clears the mark");
    assert_eq!(
        client.get(&key("v")).await.unwrap().unwrap().deletion(),
        None
    );
    client.delete(&key("v")).await.unwrap();
    let mut cleared = client.get(&key("v")).await.unwrap().unwrap();
    let deletion = cleared.deletion();
    cleared.lifecycle.set_deletion(None);
    cleared.size = 2;
    let updated = client.update(cleared).await.unwrap();
    assert_eq!(
        updated.deletion(),
        deletion,
        "an update keeps the stored mark"
    );
    let stored = client.get(&key("v")).await.unwrap().unwrap();
    assert_eq!((stored.size, stored.deletion()), (2, deletion));
    // An update that drops the last finalizer removes the object.
    let mut last = stored;
    last.lifecycle.remove_finalizer("a");
    let removed = client.update(last).await.unwrap();
    assert!(removed.version > updated.version);
    assert_eq!(client.get(&key("v")).await.unwrap(), None);
    // Without finalizers a delete removes at once.
    client.create(volume("w", &[])).await.unwrap();
    client.delete(&key("w")).await.unwrap();
    assert_eq!(client.get(&key("w")).await.unwrap(), None);
}

pub async fn finalizer_helpers_are_idempotent(client: Client<Volume>) {
    client.create(volume("v", &[])).await.unwrap();
    let added = client.add_finalizer(&key("v"), "a").await.unwrap();
    assert_eq!(added.effect, Effect::Updated);
    let again = client.add_finalizer(&key("v"), "a").await.unwrap();
    assert_eq!(
        (again.effect, again.object.version),
        (Effect::Unchanged, added.object.version)
    );
    assert_eq!(again.object.lifecycle.finalizers(), ["a"]);
    let kept = client
        .remove_finalizer(&key("v"), "a")
        .await
        .unwrap()
        .unwrap();
    assert!(kept.lifecycle.finalizers().is_empty() && kept.deletion().is_none());
    let again = client
        .remove_finalizer(&key("v"), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.version, kept.version, "nothing written");
    let error = client.add_finalizer(&key("gone"), "a").await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert_eq!(
        client.remove_finalizer(&key("gone"), "a").await.unwrap(),
        None
    );
}

pub async fn a_versioned_delete_of_an_object_with_finalizers_conflicts_when_stale(
    client: Client<Volume>,
) {
    let old = client.create(volume("v", &[])).await.unwrap();
    let new = client.add_finalizer(&key("v"), "a").await.unwrap().object;
    let error = client.delete_at(&key("v"), old.version).await.unwrap_err();
    assert!(error.is_conflict(), "{error:?}");
    assert_eq!(
        client.get(&key("v")).await.unwrap().unwrap().deletion(),
        None
    );
    let marked_at = client.delete_at(&key("v"), new.version).await.unwrap();
    let marked = client.get(&key("v")).await.unwrap().unwrap();
    assert_eq!(marked.version, marked_at);
    assert!(marked.deletion().is_some());
}
