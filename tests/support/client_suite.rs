//! One suite of client semantics, run against every backend
//! (`tests/client.rs` on memory, `tests/etcd_client.rs` on etcd): each
//! check takes a client over an empty store.

#![allow(dead_code, unreachable_pub)]

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tend::client::{Backend, Client, ClientError, Effect, FencingToken};
use tend::{Deletion, Lifecycle, Object, Revision, Snapshot};

/// A small object, storable as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub name: String,
    pub value: u64,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

pub fn item(name: &str, value: u64) -> Item {
    Item {
        name: name.to_owned(),
        value,
        version: Revision::ZERO,
    }
}

/// An object with finalizers, storable as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub size: u64,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(Volume, key: name: String, version: version, lifecycle: lifecycle);

pub fn volume(name: &str, finalizers: &[&str]) -> Volume {
    let mut lifecycle = Lifecycle::new();
    for finalizer in finalizers {
        lifecycle.add_finalizer(finalizer);
    }
    Volume {
        name: name.to_owned(),
        size: 1,
        lifecycle,
        version: Revision::ZERO,
    }
}

fn key(name: &str) -> String {
    name.to_owned()
}

/// A check of the suite.
pub type Check = fn(Client<Item>) -> BoxFuture<'static, ()>;

/// Every check, by name.
pub const CHECKS: &[(&str, Check)] = &[
    ("writes_get_growing_versions_and_reads_are_live", |c| {
        writes_get_growing_versions_and_reads_are_live(c).boxed()
    }),
    ("a_stale_update_conflicts_and_writes_nothing", |c| {
        a_stale_update_conflicts_and_writes_nothing(c).boxed()
    }),
    (
        "a_delete_at_a_stale_version_conflicts_and_deletes_nothing",
        |c| a_delete_at_a_stale_version_conflicts_and_deletes_nothing(c).boxed(),
    ),
    ("missing_and_taken_keys_fail_with_typed_errors", |c| {
        missing_and_taken_keys_fail_with_typed_errors(c).boxed()
    }),
    ("modify_rereads_and_retries_on_conflict", |c| {
        modify_rereads_and_retries_on_conflict(c).boxed()
    }),
    (
        "modify_gives_up_after_its_attempts_with_a_typed_error",
        |c| modify_gives_up_after_its_attempts_with_a_typed_error(c).boxed(),
    ),
    ("modify_reports_unchanged_and_not_found", |c| {
        modify_reports_unchanged_and_not_found(c).boxed()
    }),
    ("create_or_update_reports_created_updated_unchanged", |c| {
        create_or_update_reports_created_updated_unchanged(c).boxed()
    }),
    ("create_or_update_survives_a_lost_create_race", |c| {
        create_or_update_survives_a_lost_create_race(c).boxed()
    }),
    ("a_change_that_moves_the_key_is_refused", |c| {
        a_change_that_moves_the_key_is_refused(c).boxed()
    }),
    ("a_token_without_a_fencing_authority_is_refused", |c| {
        a_token_without_a_fencing_authority_is_refused(c).boxed()
    }),
    ("finalizers_on_a_type_without_them_are_invalid", |c| {
        finalizers_on_a_type_without_them_are_invalid(c).boxed()
    }),
];

/// A check of the finalizer suite.
pub type FinalizerCheck = fn(Client<Volume>) -> BoxFuture<'static, ()>;

/// Every finalizer check, by name.
pub const FINALIZER_CHECKS: &[(&str, FinalizerCheck)] = &[
    (
        "a_delete_with_finalizers_marks_and_the_last_removal_deletes",
        |c| a_delete_with_finalizers_marks_and_the_last_removal_deletes(c).boxed(),
    ),
    (
        "no_finalizer_can_be_added_to_an_object_being_deleted",
        |c| no_finalizer_can_be_added_to_an_object_being_deleted(c).boxed(),
    ),
    ("the_deletion_mark_belongs_to_the_backend", |c| {
        the_deletion_mark_belongs_to_the_backend(c).boxed()
    }),
    ("finalizer_helpers_are_idempotent", |c| {
        finalizer_helpers_are_idempotent(c).boxed()
    }),
    (
        "a_versioned_delete_of_an_object_with_finalizers_conflicts_when_stale",
        |c| a_versioned_delete_of_an_object_with_finalizers_conflicts_when_stale(c).boxed(),
    ),
];

/// Runs every check, each on a fresh client from `fresh`.
pub async fn run_all<F, Fut>(mut fresh: F)
where
    F: FnMut(&str) -> Fut,
    Fut: Future<Output = Client<Item>>,
{
    for (name, check) in CHECKS {
        eprintln!("check: {name}");
        check(fresh(name).await).await;
    }
}

/// Runs every finalizer check, each on a fresh client from `fresh`.
pub async fn run_finalizers<F, Fut>(mut fresh: F)
where
    F: FnMut(&str) -> Fut,
    Fut: Future<Output = Client<Volume>>,
{
    for (name, check) in FINALIZER_CHECKS {
        eprintln!("check: {name}");
        check(fresh(name).await).await;
    }
}

/// Every object stored, by name, with its value and version.
async fn stored(client: &Client<Item>) -> Vec<(String, u64, Revision)> {
    let Snapshot { objects, .. } = client.list().await.expect("list");
    let mut all: Vec<_> = objects
        .into_iter()
        .map(|i| (i.name, i.value, i.version))
        .collect();
    all.sort();
    all
}

pub async fn writes_get_growing_versions_and_reads_are_live(client: Client<Item>) {
    let a = client.create(item("a", 1)).await.unwrap();
    let b = client.create(item("b", 1)).await.unwrap();
    assert!(Revision::ZERO < a.version && a.version < b.version);
    assert_eq!(client.get(&key("a")).await.unwrap(), Some(a.clone()));
    let mut next = a.clone();
    next.value = 2;
    let a2 = client.update(next).await.unwrap();
    assert!(a2.version > b.version);
    assert_eq!(client.get(&key("a")).await.unwrap().unwrap().value, 2);
    let listed = client.list().await.unwrap();
    assert!(listed.revision >= a2.version);
    assert_eq!(
        stored(&client).await,
        [("a".into(), 2, a2.version), ("b".into(), 1, b.version)]
    );
    let deleted = client.delete(&key("b")).await.unwrap();
    assert!(deleted > a2.version, "a delete makes a new revision");
    assert_eq!(client.get(&key("b")).await.unwrap(), None);
    let deleted = client.delete_at(&key("a"), a2.version).await.unwrap();
    assert!(client.list().await.unwrap().objects.is_empty());
    assert!(client.list().await.unwrap().revision >= deleted);
}

pub async fn a_stale_update_conflicts_and_writes_nothing(client: Client<Item>) {
    let stale = client.create(item("a", 1)).await.unwrap();
    let mut fresh = stale.clone();
    fresh.value = 2;
    let fresh = client.update(fresh).await.unwrap();
    let before = stored(&client).await;
    let mut late = stale.clone();
    late.value = 3;
    let error = client.update(late).await.unwrap_err();
    match &error {
        ClientError::Conflict {
            key,
            expected,
            actual,
        } => {
            assert_eq!(key, "\"a\"");
            assert_eq!((*expected, *actual), (stale.version, fresh.version));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(error.is_conflict() && !error.is_retryable() && !error.is_not_found());
    assert_eq!(stored(&client).await, before, "nothing written");
}

pub async fn a_delete_at_a_stale_version_conflicts_and_deletes_nothing(client: Client<Item>) {
    let old = client.create(item("a", 1)).await.unwrap();
    let mut next = old.clone();
    next.value = 2;
    let new = client.update(next).await.unwrap();
    let error = client.delete_at(&key("a"), old.version).await.unwrap_err();
    assert!(error.is_conflict(), "{error:?}");
    assert_eq!(stored(&client).await, [("a".into(), 2, new.version)]);
    client.delete_at(&key("a"), new.version).await.unwrap();
    assert_eq!(client.get(&key("a")).await.unwrap(), None);
}

pub async fn missing_and_taken_keys_fail_with_typed_errors(client: Client<Item>) {
    let error = client.update(item("nope", 1)).await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert_eq!(error.to_string(), "object \"nope\" not found");
    assert!(
        client
            .delete(&key("nope"))
            .await
            .unwrap_err()
            .is_not_found()
    );
    let at = client.delete_at(&key("nope"), Revision::new(1)).await;
    assert!(at.unwrap_err().is_not_found());
    assert_eq!(client.get(&key("nope")).await.unwrap(), None);
    let a = client.create(item("a", 1)).await.unwrap();
    let error = client.create(item("a", 2)).await.unwrap_err();
    assert!(error.is_already_exists(), "{error:?}");
    assert_eq!(error.to_string(), "object \"a\" already exists");
    assert_eq!(stored(&client).await, [("a".into(), 1, a.version)]);
}

/// A backend that lets a rival write the object just before each of the
/// first `rival_updates` updates (and creates it just before each of the
/// first `rival_creates` creates): a deterministic concurrent writer.
struct Rival {
    inner: Client<Item>,
    rival_updates: AtomicU32,
    rival_creates: AtomicU32,
    updates: Arc<AtomicU32>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[tend::async_trait]
impl Backend for Rival {
    type Object = Item;

    fn name(&self) -> &str {
        "rival"
    }

    async fn get(&self, key: &String) -> Result<Option<Item>, ClientError> {
        self.inner.get(key).await
    }

    async fn list(&self) -> Result<Snapshot<Item>, ClientError> {
        self.inner.list().await
    }

    async fn create(&self, object: Item, token: Option<FencingToken>) -> Result<Item, ClientError> {
        assert_eq!(token, None);
        if take(&self.rival_creates) {
            self.inner.create(item(&object.name, 500)).await.unwrap();
        }
        self.inner.create(object).await
    }

    async fn update(&self, object: Item, token: Option<FencingToken>) -> Result<Item, ClientError> {
        assert_eq!(token, None);
        self.updates.fetch_add(1, Ordering::SeqCst);
        if take(&self.rival_updates) {
            let mut theirs = self.inner.get(&object.name).await?.unwrap();
            theirs.value += 1000;
            self.inner.update(theirs).await.unwrap();
        }
        self.inner.update(object).await
    }

    async fn delete(
        &self,
        key: &String,
        version: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        assert_eq!(token, None);
        match version {
            Some(version) => self.inner.delete_at(key, version).await,
            None => self.inner.delete(key).await,
        }
    }
}

/// `client` behind a rival; also returns the count of updates tried.
fn with_rival(client: &Client<Item>, updates: u32, creates: u32) -> (Client<Item>, Arc<AtomicU32>) {
    let tried = Arc::new(AtomicU32::new(0));
    let rival = Rival {
        inner: client.clone(),
        rival_updates: AtomicU32::new(updates),
        rival_creates: AtomicU32::new(creates),
        updates: Arc::clone(&tried),
    };
    (Client::new(rival), tried)
}

pub async fn modify_rereads_and_retries_on_conflict(client: Client<Item>) {
    client.create(item("a", 1)).await.unwrap();
    let (contended, tried) = with_rival(&client, 2, 0);
    let mut calls = 0;
    let written = contended
        .modify(&key("a"), |item| {
            calls += 1;
            item.value += 1;
        })
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Updated);
    assert_eq!(calls, 3, "the change is applied to each fresh read");
    assert_eq!(tried.load(Ordering::SeqCst), 3);
    // Both rival writes (+1000 each) survive: the change was re-applied.
    assert_eq!(written.object.value, 2002);
    assert_eq!(client.get(&key("a")).await.unwrap(), Some(written.object));
}

pub async fn modify_gives_up_after_its_attempts_with_a_typed_error(client: Client<Item>) {
    client.create(item("a", 1)).await.unwrap();
    let (contended, tried) = with_rival(&client, u32::MAX, 0);
    let attempts = NonZeroU32::new(3).unwrap();
    let error = contended
        .conflict_attempts(attempts)
        .modify(&key("a"), |item| item.value += 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::TooManyConflicts { attempts: 3, .. }),
        "{error:?}"
    );
    assert_eq!(tried.load(Ordering::SeqCst), 3, "exactly the bound");
    assert_eq!(
        client.get(&key("a")).await.unwrap().unwrap().value,
        3001,
        "only the rival's writes landed"
    );
    // The default bound.
    let (contended, tried) = with_rival(&client, u32::MAX, 0);
    let error = contended.modify(&key("a"), |i| i.value += 1).await;
    assert!(matches!(
        error,
        Err(ClientError::TooManyConflicts { attempts: 5, .. })
    ));
    assert_eq!(tried.load(Ordering::SeqCst), 5);
}

pub async fn modify_reports_unchanged_and_not_found(client: Client<Item>) {
    let a = client.create(item("a", 1)).await.unwrap();
    let written = client
        .modify(&key("a"), |item| item.value = 1)
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Unchanged);
    assert_eq!(written.object, a);
    assert_eq!(
        stored(&client).await,
        [("a".into(), 1, a.version)],
        "nothing written"
    );
    let error = client.modify(&key("nope"), |item| item.value = 2).await;
    assert!(error.unwrap_err().is_not_found());
    assert_eq!(client.get(&key("nope")).await.unwrap(), None);
}

pub async fn create_or_update_reports_created_updated_unchanged(client: Client<Item>) {
    let created = client
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(created.effect, Effect::Created);
    assert_eq!(created.object.value, 7);
    let unchanged = client
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(unchanged.effect, Effect::Unchanged);
    assert_eq!(unchanged.object.version, created.object.version);
    let updated = client
        .create_or_update(item("a", 0), |item| item.value = 8)
        .await
        .unwrap();
    assert_eq!(updated.effect, Effect::Updated);
    assert!(updated.object.version > created.object.version);
    assert_eq!(
        stored(&client).await,
        [("a".into(), 8, updated.object.version)]
    );
}

pub async fn create_or_update_survives_a_lost_create_race(client: Client<Item>) {
    // A rival creates the object between the read and the create, then
    // wins one update race: the helper starts over each time.
    let (contended, tried) = with_rival(&client, 1, 1);
    let written = contended
        .create_or_update(item("a", 0), |item| item.value = 7)
        .await
        .unwrap();
    assert_eq!(written.effect, Effect::Updated);
    assert_eq!(written.object.value, 7);
    assert_eq!(tried.load(Ordering::SeqCst), 2);
    assert_eq!(client.get(&key("a")).await.unwrap(), Some(written.object));
    let (contended, _) = with_rival(&client, u32::MAX, 0);
    let error = contended
        .create_or_update(item("a", 0), |item| item.value += 1)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::TooManyConflicts { .. }),
        "{error:?}"
    );
}

pub async fn a_change_that_moves_the_key_is_refused(client: Client<Item>) {
    let a = client.create(item("a", 1)).await.unwrap();
    let error = client
        .modify(&key("a"), |item| item.name = "b".into())
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    let error = client
        .create_or_update(item("c", 1), |item| item.name = "d".into())
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    assert_eq!(stored(&client).await, [("a".into(), 1, a.version)]);
}

pub async fn a_token_without_a_fencing_authority_is_refused(client: Client<Item>) {
    let a = client.create(item("a", 1)).await.unwrap();
    let fenced = client.fenced(FencingToken::new(1));
    assert_eq!(fenced.token(), Some(FencingToken::new(1)));
    assert!(matches!(
        fenced.create(item("b", 1)).await,
        Err(ClientError::NoFencing)
    ));
    assert!(matches!(
        fenced.update(a.clone()).await,
        Err(ClientError::NoFencing)
    ));
    assert!(matches!(
        fenced.delete(&key("a")).await,
        Err(ClientError::NoFencing)
    ));
    assert_eq!(stored(&client).await, [("a".into(), 1, a.version)]);
    assert_eq!(fenced.unfenced().token(), None);
    fenced.unfenced().delete(&key("a")).await.unwrap();
}

/// `stale` carries a deposed leader's token, `current` the leader's; both
/// over the same empty store.
pub async fn a_stale_token_is_fenced_and_changes_nothing(
    stale: Client<Item>,
    current: Client<Item>,
) {
    let a = current.create(item("a", 1)).await.unwrap();
    let before = stored(&current).await;
    let token = stale.token().expect("a fenced client");
    let fenced = |result: Result<_, ClientError>| match result {
        Err(ClientError::Fenced { token: t }) => assert_eq!(t, token),
        other => panic!("expected fenced, got {other:?}"),
    };
    fenced(stale.create(item("b", 1)).await.map(drop));
    let mut late = a.clone();
    late.value = 99;
    fenced(stale.update(late).await.map(drop));
    fenced(stale.delete(&key("a")).await.map(drop));
    fenced(stale.delete_at(&key("a"), a.version).await.map(drop));
    fenced(stale.modify(&key("a"), |i| i.value = 5).await.map(drop));
    fenced(stale.create_or_update(item("c", 1), |_| {}).await.map(drop));
    assert!(stale.create(item("b", 1)).await.unwrap_err().is_fenced());
    assert_eq!(stored(&current).await, before, "no fenced write landed");
    // The leader's writes land.
    let mut next = a;
    next.value = 2;
    current.update(next).await.unwrap();
    current.create(item("b", 1)).await.unwrap();
    current.delete(&key("b")).await.unwrap();
    assert_eq!(current.get(&key("a")).await.unwrap().unwrap().value, 2);
}

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
