//! The client on a real Kubernetes API server: versions and conflicts,
//! preconditions, finalizers, status writes, owner references, server-side
//! apply, the local fencing check, and what RBAC refuses.

#[path = "../support/kube.rs"]
mod kube_support;
#[path = "../support/mod.rs"]
mod support;

mod forbidden;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_support::{config_map, fresh};
use support::within;
use tend::client::{ClientError, Fencing, FencingToken};
use tend::kube::KubeSource;
use tend::memory::MemoryStore;
// kube-rs's `ResourceExt` beside tend's `Object`, as users import both:
// no method of one shadows the other.
use kube::ResourceExt;
use tend::{Object, ObjectKey, Revision};

const LIMIT: Duration = Duration::from_secs(30);

#[path = "../support/kube_replicaset.rs"]
mod replicaset;

#[tokio::test]
async fn writes_carry_resource_versions_and_stale_ones_conflict() {
    let (client, ns) = fresh("client-versions").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client, &ns).client();
    let created = within(
        "create",
        LIMIT,
        maps.create(config_map(&ns, "a", &[("k", "1")])),
    )
    .await
    .expect("created");
    assert!(
        created.version() > Revision::ZERO,
        "a version from the server"
    );
    let again = maps.create(config_map(&ns, "a", &[])).await.unwrap_err();
    assert!(again.is_already_exists(), "{again:?}");

    let mut next = created.clone();
    next.data = Some(BTreeMap::from([("k".to_owned(), "2".to_owned())]));
    let updated = maps.update(next.clone()).await.expect("updated");
    assert!(updated.version() > created.version());
    // `next` still carries the old version: a stale write.
    match maps.update(next).await.unwrap_err() {
        ClientError::Conflict {
            expected, actual, ..
        } => {
            assert_eq!(expected, created.version());
            assert_eq!(actual, updated.version(), "the stored version, read again");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut unversioned = updated.clone();
    unversioned.set_version(Revision::ZERO);
    let error = maps.update(unversioned).await.unwrap_err();
    assert!(
        error.is_conflict(),
        "no version is no blind write: {error:?}"
    );

    let key = ObjectKey::new(&ns, "a");
    let stale = maps.delete_at(&key, created.version()).await.unwrap_err();
    assert!(
        stale.is_conflict(),
        "a stale delete precondition: {stale:?}"
    );
    maps.delete_at(&key, updated.version())
        .await
        .expect("deleted");
    assert!(maps.get(&key).await.expect("read").is_none());
    assert!(maps.delete(&key).await.unwrap_err().is_not_found());
    let missing = maps.update(updated).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
}

#[tokio::test]
async fn a_finalizer_holds_a_delete_until_it_is_removed() {
    let (client, ns) = fresh("client-finalizers").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client, &ns).client();
    maps.create(config_map(&ns, "held", &[]))
        .await
        .expect("created");
    let key = ObjectKey::new(&ns, "held");
    let added = maps
        .add_finalizer(&key, "tend.dev/cleanup")
        .await
        .expect("added");
    assert_eq!(
        added.object.finalizer_names(),
        Some(&["tend.dev/cleanup".to_owned()][..])
    );
    assert_eq!(
        added.object.finalizers(),
        ["tend.dev/cleanup"],
        "kube-rs's view"
    );
    assert_eq!(added.object.key().name, added.object.name_any());

    maps.delete(&key).await.expect("delete asked");
    let marked = maps.get(&key).await.expect("read").expect("still there");
    assert!(
        marked.deletion().is_some(),
        "marked, waiting for its finalizer"
    );
    let refused = maps
        .add_finalizer(&key, "tend.dev/other")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::BeingDeleted { .. }),
        "no new finalizer on an object being deleted: {refused:?}"
    );
    let gone = maps
        .remove_finalizer(&key, "tend.dev/cleanup")
        .await
        .expect("removed");
    assert!(gone.is_none(), "the last finalizer's removal deletes it");
    assert!(maps.get(&key).await.expect("read").is_none());
    let again = maps
        .remove_finalizer(&key, "tend.dev/cleanup")
        .await
        .expect("idempotent");
    assert!(again.is_none());
}

#[tokio::test]
async fn a_status_write_changes_the_status_only() {
    let (client, ns) = fresh("client-status").await;
    let sets = KubeSource::<ReplicaSet>::namespaced(client.clone(), &ns).client();
    let created = sets
        .create(replicaset::replica_set(&ns, "web", 2))
        .await
        .expect("created");
    let mut next = created.clone();
    next.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
        replicas: 2,
        ..Default::default()
    });
    if let Some(spec) = next.spec.as_mut() {
        spec.replicas = Some(9);
    }
    let written = sets
        .update_status(next.clone())
        .await
        .expect("status written");
    assert_eq!(written.status.as_ref().map(|s| s.replicas), Some(2));
    assert_eq!(
        written.spec.as_ref().and_then(|s| s.replicas),
        Some(2),
        "the spec is not the status subresource's to change"
    );
    let stale = sets.update_status(next).await.unwrap_err();
    assert!(
        stale.is_conflict(),
        "status writes carry the version too: {stale:?}"
    );

    // A kind without a status subresource: the route is missing, not the
    // object.
    let maps = KubeSource::<ConfigMap>::namespaced(client, &ns).client();
    let map = maps
        .create(config_map(&ns, "plain", &[]))
        .await
        .expect("created");
    let refused = maps.update_status(map).await.unwrap_err();
    assert!(
        matches!(refused, ClientError::Invalid { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn owner_references_are_stored_as_written() {
    let (client, ns) = fresh("client-owners").await;
    let sets = KubeSource::<ReplicaSet>::namespaced(client.clone(), &ns).client();
    let pods = KubeSource::<Pod>::namespaced(client, &ns).client();
    let set = sets
        .create(replicaset::replica_set(&ns, "web", 1))
        .await
        .expect("created");
    let mut pod = Pod::default();
    pod.metadata.name = Some("web-1".to_owned());
    pod.metadata.namespace = Some(ns.clone());
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: "ReplicaSet".to_owned(),
            name: "web".to_owned(),
            uid: set.metadata.uid.clone().expect("a uid"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    pod.spec = set
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .and_then(|t| t.spec);
    pods.create(pod).await.expect("created");
    let stored = pods
        .get(&ObjectKey::new(&ns, "web-1"))
        .await
        .expect("read")
        .expect("there");
    assert_eq!(
        replicaset::owner_of(&stored),
        Some(ObjectKey::new(&ns, "web"))
    );
}

#[tokio::test]
async fn server_side_apply_merges_by_field_manager_and_only_on_kubernetes() {
    let (client, ns) = fresh("client-apply").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client, &ns).client();
    let mut desired = config_map(&ns, "applied", &[("owned", "1")]);
    desired.metadata.resource_version = Some("1".to_owned()); // ignored by apply
    let first = maps
        .apply(desired, "tend-test")
        .await
        .expect("applied (created)");
    let mut other = first.clone();
    other
        .data
        .get_or_insert_with(BTreeMap::new)
        .insert("theirs".to_owned(), "x".to_owned());
    maps.update(other).await.expect("another writer's field");
    let second = maps
        .apply(config_map(&ns, "applied", &[("owned", "2")]), "tend-test")
        .await
        .expect("applied again");
    let data = second.data.expect("data");
    assert_eq!(data.get("owned").map(String::as_str), Some("2"));
    assert_eq!(
        data.get("theirs").map(String::as_str),
        Some("x"),
        "not ours to remove"
    );

    let memory = MemoryStore::<support::Pod>::new("pods").client();
    let refused = memory
        .apply(support::Pod::new("p", "o", 1), "m")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::Unsupported { .. }),
        "{refused:?}"
    );
}

/// A fencing authority that says no token is current.
#[derive(Clone)]
struct Deposed;

impl Fencing for Deposed {
    fn is_current(&self, _token: FencingToken) -> bool {
        false
    }
}

#[tokio::test]
async fn a_stale_token_writes_nothing_and_a_token_needs_an_authority() {
    let (client, ns) = fresh("client-fencing").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let fenced = source
        .client_fenced_by(&Deposed)
        .fenced(FencingToken::new(7));
    let error = fenced
        .create(config_map(&ns, "late", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::Fenced { token } if token == FencingToken::new(7)),
        "{error:?}"
    );
    let plain = source.client();
    assert!(
        plain
            .get(&ObjectKey::new(&ns, "late"))
            .await
            .expect("read")
            .is_none()
    );
    let error = plain
        .fenced(FencingToken::new(7))
        .create(config_map(&ns, "late", &[]))
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::NoFencing), "{error:?}");
}

/// Adds its finalizer to every map and, once a map is being deleted, cleans
/// up (counted) and removes the finalizer.
struct Cleaner {
    cleaned: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

const FINALIZER: &str = "tend.dev/cleanup";

impl tend::controller::Reconciler<ConfigMap> for Cleaner {
    type Error = ClientError;

    async fn reconcile(
        &self,
        ctx: tend::controller::Context<ConfigMap>,
    ) -> Result<tend::controller::Action, ClientError> {
        let maps = ctx.client::<ConfigMap>().expect("configured");
        let Some(map) = ctx.object() else {
            return Ok(tend::controller::Action::Done);
        };
        if map.deletion().is_none() {
            maps.add_finalizer(ctx.key(), FINALIZER).await?;
        } else if map
            .finalizer_names()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
        {
            self.cleaned
                .lock()
                .expect("not poisoned")
                .push(ctx.key().name.clone());
            maps.remove_finalizer(ctx.key(), FINALIZER).await?;
        }
        Ok(tend::controller::Action::Done)
    }
}

/// Runs a `Cleaner` over `ns` until `stop`.
async fn run_cleaner(
    client: kube::Client,
    ns: String,
    cleaned: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let maps = source.client();
    let informer = tend::Informer::builder(source).build().expect("valid");
    let controller =
        tend::controller::Controller::builder("cleaner", &informer, Cleaner { cleaned })
            .client(maps)
            .build()
            .expect("valid");
    let running = {
        let (informer, stop) = (informer.clone(), stop.clone());
        tokio::spawn(async move { informer.run(stop).await })
    };
    controller.run(stop).await.expect("ran");
    running.await.expect("joined").expect("informer ran");
}

#[tokio::test]
async fn a_delete_waits_for_cleanup_which_runs_once_across_a_controller_restart() {
    let (client, ns) = fresh("client-cleanup").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    let key = ObjectKey::new(&ns, "guarded");
    let cleaned = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let first = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(run_cleaner(
        client.clone(),
        ns.clone(),
        cleaned.clone(),
        first.clone(),
    ));
    maps.create(config_map(&ns, "guarded", &[]))
        .await
        .expect("created");
    within(
        "the first controller's finalizer",
        LIMIT,
        guarded(&maps, &key),
    )
    .await;
    first.cancel();
    within("the first controller to stop", LIMIT, running)
        .await
        .expect("joined");

    // Deleted while no controller runs: it waits for its cleanup.
    maps.delete(&key).await.expect("delete asked");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = maps.get(&key).await.expect("read").expect("still there");
    assert!(waiting.deletion().is_some(), "marked, waiting");
    assert!(cleaned.lock().expect("not poisoned").is_empty());

    let second = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(run_cleaner(
        client,
        ns.clone(),
        cleaned.clone(),
        second.clone(),
    ));
    let gone = async {
        while maps.get(&key).await.expect("read").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within("the restarted controller's cleanup", LIMIT, gone).await;
    // Its watch then sees the delete: nothing more to clean.
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.cancel();
    within("the second controller to stop", LIMIT, running)
        .await
        .expect("joined");
    assert_eq!(
        *cleaned.lock().expect("not poisoned"),
        ["guarded"],
        "cleaned exactly once"
    );
}

/// Until the object at `key` carries a finalizer.
async fn guarded(maps: &tend::client::Client<ConfigMap>, key: &ObjectKey) {
    loop {
        let map = maps.get(key).await.expect("read").expect("there");
        if map.finalizer_names().is_some_and(|f| !f.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
