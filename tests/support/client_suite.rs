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

#[path = "client_suite/conflicts.rs"]
mod conflicts;
#[path = "client_suite/finalizers.rs"]
mod finalizers;

pub use conflicts::*;
pub use finalizers::*;

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
