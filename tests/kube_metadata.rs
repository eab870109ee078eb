//! Metadata-only sources, clients and controllers on a real API server:
//! `KubeSource<PartialObjectMeta<K>>` lists, watches and writes metadata
//! only, and a reconcile reads the whole object live when it needs it.

#[path = "support/kube.rs"]
mod kube_support;
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube_support::{config_map, fresh, labelled};
use support::within;
use tend::client::{Client, ClientError};
use tend::controller::{
    Action, Context, Controller, Finalize, FinalizerError, Reconciler, finalizer,
};
use tend::kube::{KubeSource, ListMode};
use tend::testing::Harness;
use tend::{Informer, Object, ObjectKey, Source};

const LIMIT: Duration = Duration::from_secs(60);

type Meta = PartialObjectMeta<ConfigMap>;

#[tokio::test]
async fn a_metadata_only_source_lists_and_watches_what_the_server_sends_as_metadata() {
    use futures::StreamExt;
    let (client, ns) = fresh("lists-meta").await;
    let full = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    let big = "x".repeat(10_000);
    full.create(labelled(
        config_map(&ns, "a", &[("big", &big)]),
        &[("app", "web")],
    ))
    .await
    .expect("created");
    for mode in [ListMode::Streaming, ListMode::Paged] {
        let source = KubeSource::<Meta>::namespaced(client.clone(), &ns).list_mode(mode);
        let snapshot = source.list().await.expect("listed");
        let streamed = mode == ListMode::Streaming;
        assert_eq!(
            source.streams_lists(),
            streamed,
            "{mode:?}: listed as asked"
        );
        let [a] = snapshot.objects.as_slice() else {
            panic!("one object: {:?}", snapshot.objects);
        };
        let kind = a.types.as_ref().map(|types| types.kind.as_str());
        assert_eq!(
            kind,
            Some("PartialObjectMetadata"),
            "{mode:?}: the server sent metadata"
        );
        assert_eq!(
            a.labels().and_then(|l| l.get("app")).map(String::as_str),
            Some("web")
        );
        assert!(a.version() > tend::Revision::ZERO);
    }
    let source = KubeSource::<Meta>::namespaced(client.clone(), &ns);
    let from = source.list().await.expect("listed").revision;
    let mut changes = source.watch(from).await.expect("a watch");
    full.create(config_map(&ns, "b", &[("big", &big)]))
        .await
        .expect("created");
    let change = within("the watch's change", LIMIT, async {
        loop {
            match changes.next().await {
                Some(Ok(tend::Change::Applied(object))) => return object,
                Some(Ok(_)) => {}
                other => panic!("the watch ended: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(change.key().name, "b");
    let kind = change.types.as_ref().map(|types| types.kind.as_str());
    assert_eq!(kind, Some("PartialObjectMetadata"));
}

#[tokio::test]
async fn a_metadata_client_updates_metadata_and_leaves_the_rest_of_the_object() {
    let (full, meta, key) = clients_and_one_map("meta-update").await;
    let mut read = meta.get(&key).await.expect("read").expect("there");
    read.metadata.labels = Some([("new".to_owned(), "2".to_owned())].into());
    read.metadata.finalizers = Some(vec!["tend.test/keep".into()]);
    let written = meta.update(read.clone()).await.expect("metadata updated");
    assert!(written.version() > read.version());

    let stored = full.get(&key).await.expect("read").expect("there");
    let labels: Vec<_> = stored.labels().into_iter().flatten().collect();
    assert_eq!(
        labels,
        [(&"new".to_owned(), &"2".to_owned())],
        "the labels replaced, the old one gone"
    );
    assert_eq!(
        stored.finalizer_names(),
        Some(&["tend.test/keep".to_owned()][..])
    );
    assert_eq!(
        stored
            .data
            .as_ref()
            .and_then(|d| d.get("keep"))
            .map(String::as_str),
        Some("me"),
        "the data is untouched"
    );

    let stale = meta.update(read.clone()).await;
    assert!(
        matches!(stale, Err(ClientError::Conflict { .. })),
        "an update from a stale read conflicts: {stale:?}"
    );
    let mut unversioned = written.clone();
    unversioned.metadata.resource_version = None;
    assert!(matches!(
        meta.update(unversioned).await,
        Err(ClientError::Conflict { .. })
    ));

    let mut done = meta.get(&key).await.expect("read").expect("there");
    done.metadata.finalizers = None;
    meta.update(done).await.expect("finalizer removed");
    meta.delete(&key).await.expect("deleted");
    assert!(full.get(&key).await.expect("read").is_none());
}

#[tokio::test]
async fn a_metadata_client_applies_metadata_and_refuses_what_needs_the_whole_object() {
    let (full, meta, key) = clients_and_one_map("meta-apply").await;
    let written = meta.get(&key).await.expect("read").expect("there");
    assert!(matches!(
        meta.create(written.clone()).await,
        Err(ClientError::Unsupported { .. })
    ));
    assert!(matches!(
        meta.update_status(written.clone()).await,
        Err(ClientError::Unsupported { .. })
    ));

    let mut applied = Meta::default();
    applied.metadata.name = Some("a".into());
    applied.metadata.namespace = Some(key.namespace.clone());
    applied.metadata.annotations = Some([("tend.test/by".to_owned(), "apply".to_owned())].into());
    meta.apply(applied, "tend-test")
        .await
        .expect("metadata applied");
    let stored = full.get(&key).await.expect("read").expect("there");
    assert_eq!(
        stored
            .annotations()
            .and_then(|a| a.get("tend.test/by"))
            .map(String::as_str),
        Some("apply")
    );
    assert_eq!(
        stored.data.as_ref().map(BTreeMap::len),
        Some(1),
        "the data is untouched"
    );
}

/// A full client, a metadata-only one, and the key of a ConfigMap `a`
/// labelled `old=1` with data `keep=me` in a fresh namespace.
async fn clients_and_one_map(prefix: &str) -> (Client<ConfigMap>, Client<Meta>, ObjectKey) {
    let (client, ns) = fresh(prefix).await;
    let full = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    let meta = KubeSource::<Meta>::namespaced(client, &ns).client();
    let map = labelled(config_map(&ns, "a", &[("keep", "me")]), &[("old", "1")]);
    let key = full.create(map).await.expect("created").key();
    (full, meta, key)
}

/// Keeps a finalizer on every ConfigMap it sees as metadata, notes the
/// size of each one's data read live, and counts the cleanups of deleted
/// ones.
struct Sizer {
    full: Client<ConfigMap>,
    sizes: Arc<Mutex<BTreeMap<String, usize>>>,
    cleanups: Arc<Mutex<Vec<String>>>,
}

const FINALIZER: &str = "tend.test/sized";

impl Reconciler<Meta> for Sizer {
    type Error = FinalizerError<ClientError>;

    async fn reconcile(&self, ctx: Context<Meta>) -> Result<Action, Self::Error> {
        let key = ctx.key().clone();
        finalizer(&ctx, FINALIZER, |step| async move {
            match step {
                Finalize::Apply(_) => {
                    let live = self.full.get(&key).await?;
                    let size = live.and_then(|map| map.data).map_or(0, |data| data.len());
                    self.sizes.lock().unwrap().insert(key.name, size);
                }
                Finalize::Cleanup(_) => self.cleanups.lock().unwrap().push(key.name),
            }
            Ok(Action::Done)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_over_metadata_keeps_finalizers_and_reads_whole_objects_live() {
    let (client, ns) = fresh("meta-controller").await;
    let full = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    let source = KubeSource::<Meta>::namespaced(client.clone(), &ns);
    for (name, keys) in [("one", 1), ("three", 3)] {
        let data: Vec<(String, String)> =
            (0..keys).map(|i| (format!("k{i}"), "v".into())).collect();
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        full.create(config_map(&ns, name, &data))
            .await
            .expect("created");
    }
    let informer = Informer::builder(source.clone())
        .build()
        .expect("an informer");
    let (sizes, cleanups) = (Arc::default(), Arc::<Mutex<Vec<String>>>::default());
    let sizer = Sizer {
        full: full.clone(),
        sizes: Arc::clone(&sizes),
        cleanups: Arc::clone(&cleanups),
    };
    let controller = Controller::builder("sizer", informer.clone(), sizer)
        .client(source.client())
        .build()
        .expect("a controller");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    harness.settle(LIMIT).await.expect("settled");

    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(
        sizes,
        BTreeMap::from([("one".into(), 1), ("three".into(), 3)])
    );
    for name in ["one", "three"] {
        let key = ObjectKey::new(ns.clone(), name);
        let stored = full.get(&key).await.expect("read").expect("there");
        assert_eq!(stored.finalizer_names(), Some(&[FINALIZER.to_owned()][..]));
        assert!(
            stored.data.is_some_and(|data| !data.is_empty()),
            "{name}: its data is kept"
        );
    }

    let key = ObjectKey::new(ns.clone(), "three");
    full.delete(&key).await.expect("delete asked");
    within("the object to go", LIMIT, async {
        while full.get(&key).await.expect("read").is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    harness.settle(LIMIT).await.expect("settled");
    assert_eq!(*cleanups.lock().unwrap(), ["three"], "cleaned up once");
    harness.shutdown().await.expect("stopped");
}
