//! `KubeSource` on a real API server: list and watch, pagination,
//! selectors, an expired watch, and an informer that follows the server.

#[path = "support/kube.rs"]
mod kube_support;
mod support;

use std::num::NonZeroU32;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_support::{config_map, fresh, labelled};
use support::{wait_until, within};
use tend::kube::KubeSource;
use tend::testing::kube::ControlPlane;
use tend::{Change, Informer, Object, ObjectKey, Source};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(30);

fn names(objects: &[ConfigMap]) -> Vec<String> {
    let mut names: Vec<String> = objects.iter().map(|m| m.key().name).collect();
    names.sort();
    names
}

/// An informer running in a task of its own until [`stop`](Self::stop).
struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tend::InformerError>>,
}

impl Running {
    fn start(informer: &Informer<ConfigMap>) -> Self {
        let (informer, stop) = (informer.clone(), CancellationToken::new());
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { informer.run(stop).await }
        });
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        within("the informer to stop", LIMIT, self.task)
            .await
            .expect("joined")
            .expect("clean");
    }
}

/// A control plane of its own without the API server's watch cache (which
/// serves old revisions for ~75 s after etcd compacted them: see
/// `tend::testing::kube`), a fresh namespace, and a source over its
/// ConfigMaps, three of which (`a`, `b`, `c`) exist.
async fn uncached_with_abc(prefix: &str) -> (ControlPlane, String, KubeSource<ConfigMap>) {
    let plane = ControlPlane::builder()
        .apiserver_arg("--watch-cache=false")
        .start()
        .await
        .expect("a control plane of its own");
    let client = plane.client().await.expect("a client");
    let ns = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let maps = source.client();
    for name in ["a", "b", "c"] {
        maps.create(config_map(&ns, name, &[]))
            .await
            .expect("created");
    }
    (plane, ns, source)
}

#[tokio::test]
async fn a_list_over_many_pages_is_one_snapshot() {
    let (client, ns) = fresh("source-pages").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns)
        .page_size(NonZeroU32::new(2).expect("not zero"));
    let maps = source.client();
    for i in 0..7 {
        maps.create(config_map(&ns, &format!("m{i}"), &[]))
            .await
            .expect("created");
    }
    let snapshot = within("list", LIMIT, source.list()).await.expect("listed");
    assert_eq!(snapshot.objects.len(), 7, "four pages of two");
    let newest = snapshot
        .objects
        .iter()
        .map(Object::version)
        .max()
        .expect("some");
    assert!(
        snapshot.revision >= newest,
        "the snapshot's revision covers every object"
    );
    assert_eq!(source.name(), "configmaps");
}

#[tokio::test]
async fn a_watch_delivers_every_change_after_its_revision_in_order() {
    let (client, ns) = fresh("source-watch").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let maps = source.client();
    let from = source.list().await.expect("listed").revision;
    let mut changes = source.watch(from).await.expect("watching");
    let a = maps
        .create(config_map(&ns, "a", &[("v", "1")]))
        .await
        .expect("created");
    let mut next = a.clone();
    next.data = Some([("v".to_owned(), "2".to_owned())].into());
    let a2 = maps.update(next).await.expect("updated");
    let deleted = maps.delete(&a.key()).await.expect("deleted");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match within("a change", LIMIT, changes.next()).await {
            Some(Ok(Change::Bookmark(_))) => {}
            Some(Ok(change)) => seen.push(change),
            other => panic!("the watch ended or failed: {other:?}"),
        }
    }
    assert!(matches!(&seen[0], Change::Applied(m) if m.version() == a.version()));
    assert!(matches!(&seen[1], Change::Applied(m) if m.version() == a2.version()));
    match &seen[2] {
        Change::Deleted { key, revision } => {
            assert_eq!(key, &ObjectKey::new(&ns, "a"));
            assert!(*revision >= a2.version() && *revision >= deleted);
        }
        other => panic!("expected the delete, got {other:?}"),
    }
}

#[tokio::test]
async fn selectors_pick_objects_by_label_and_field() {
    let (client, ns) = fresh("source-selectors").await;
    let all = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns);
    let maps = all.client();
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db")] {
        let map = labelled(config_map(&ns, name, &[]), &[("tier", tier)]);
        maps.create(map).await.expect("created");
    }
    let web = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).labels("tier=web");
    assert_eq!(
        names(&web.list().await.expect("listed").objects),
        ["a", "b"]
    );
    let by_name = KubeSource::<ConfigMap>::namespaced(client, &ns).fields("metadata.name=c");
    assert_eq!(names(&by_name.list().await.expect("listed").objects), ["c"]);

    // A watch keeps to its selector too.
    let from = web.list().await.expect("listed").revision;
    let mut changes = web.watch(from).await.expect("watching");
    maps.create(labelled(config_map(&ns, "d", &[]), &[("tier", "db")]))
        .await
        .expect("created");
    maps.create(labelled(config_map(&ns, "e", &[]), &[("tier", "web")]))
        .await
        .expect("created");
    loop {
        match within("a change", LIMIT, changes.next()).await {
            Some(Ok(Change::Bookmark(_))) => {}
            Some(Ok(Change::Applied(map))) => {
                assert_eq!(map.key().name, "e", "d is not a web map");
                break;
            }
            other => panic!("unexpected: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_is_expired_and_a_relist_shows_the_deletes() {
    let (plane, ns, source) = uncached_with_abc("source-expired").await;
    let maps = source.client();
    let before = source.list().await.expect("listed").revision;
    maps.delete(&ObjectKey::new(&ns, "b"))
        .await
        .expect("deleted");
    // Compaction keeps the revision it compacts at: one write more, so the
    // delete right after `before` is compacted away.
    maps.create(config_map(&ns, "d", &[]))
        .await
        .expect("created");
    within("compaction", LIMIT, plane.compact_etcd())
        .await
        .expect("compacted");
    let error = match within("the watch", LIMIT, source.watch(before)).await {
        Err(error) => error,
        Ok(mut stream) => match within("its first event", LIMIT, stream.next()).await {
            Some(Err(error)) => error,
            other => panic!("expected the watch to expire, got {other:?}"),
        },
    };
    assert!(error.is_expired(), "{error:?}");
    let relisted = source.list().await.expect("relisted");
    assert_eq!(
        names(&relisted.objects),
        ["a", "c", "d"],
        "the relist has the missed delete"
    );
}

#[tokio::test]
async fn an_informer_follows_the_api_server() {
    let (client, ns) = fresh("source-informer").await;
    let source = KubeSource::<ConfigMap>::namespaced(client, &ns);
    let maps = source.client();
    maps.create(config_map(&ns, "first", &[]))
        .await
        .expect("created");
    let probe = source.clone();
    let informer = Informer::builder(source).build().expect("valid");
    let running = Running::start(&informer);
    let store = informer.cache();
    wait_until("the initial list", LIMIT, || store.len() == 1).await;
    let second = maps
        .create(config_map(&ns, "second", &[]))
        .await
        .expect("created");
    maps.delete(&ObjectKey::new(&ns, "first"))
        .await
        .expect("deleted");
    wait_until("the watch's changes", LIMIT, || {
        store.len() == 1 && store.get(&second.key()).is_some()
    })
    .await;
    assert!(
        store.revision() >= second.version(),
        "the cache's revision is the server's"
    );
    // The head: a list of one object's resourceVersion, at least the newest
    // write; the first probe answered at the informer's start.
    let head = probe
        .head()
        .await
        .expect("the API server answers")
        .expect("it tells its head");
    assert!(head >= second.version(), "{head:?}");
    wait_until("the first probe", LIMIT, || informer.lag().is_some()).await;
    running.stop().await;
}

#[tokio::test]
async fn an_informer_resumes_after_the_api_server_restarts() {
    let plane = ControlPlane::start()
        .await
        .expect("a control plane of its own");
    let client = plane.client().await.expect("a client");
    let source = KubeSource::<ConfigMap>::namespaced(client, "default");
    let maps = source.client();
    let informer = Informer::builder(source).build().expect("valid");
    let running = Running::start(&informer);
    let store = informer.cache();
    maps.create(config_map("default", "before", &[]))
        .await
        .expect("created");
    wait_until("the first map", LIMIT, || store.len() == 1).await;
    within(
        "the restart",
        Duration::from_secs(60),
        plane.restart_apiserver(),
    )
    .await
    .expect("restarted");
    let after = within("a write after the restart", LIMIT, async {
        loop {
            match maps.create(config_map("default", "after", &[])).await {
                Ok(map) => return map,
                Err(error) if error.is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("{error:?}"),
            }
        }
    })
    .await;
    wait_until("the informer to resume", LIMIT, || {
        store.get(&after.key()).is_some()
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn an_informer_whose_watch_expired_while_cut_off_relists_and_drops_what_was_deleted() {
    let (plane, ns, source) = uncached_with_abc("informer-expired").await;
    let maps = source.client();
    // A long backoff: the informer stays away while the history it needs
    // is deleted, written over and compacted.
    let wait = Duration::from_secs(6);
    let informer = Informer::builder(source)
        .backoff(wait, wait, Duration::from_secs(60))
        // Only an expired watch may relist: not a run of failed watches.
        .max_watch_failures(NonZeroU32::MAX)
        .build()
        .expect("valid");
    let running = Running::start(&informer);
    let store = informer.cache();
    wait_until("the initial list", LIMIT, || store.len() == 3).await;
    plane.kill_apiserver();
    within("the API server", LIMIT, plane.start_apiserver())
        .await
        .expect("started again");
    maps.delete(&ObjectKey::new(&ns, "b"))
        .await
        .expect("deleted");
    maps.create(config_map(&ns, "d", &[]))
        .await
        .expect("created");
    within("compaction", LIMIT, plane.compact_etcd())
        .await
        .expect("compacted");
    assert!(
        store.get(&ObjectKey::new(&ns, "b")).is_some(),
        "not yet seen"
    );
    wait_until("the relist", LIMIT, || {
        store.get(&ObjectKey::new(&ns, "b")).is_none() && store.len() == 3
    })
    .await;
    let mut names: Vec<String> = store.list().iter().map(|m| m.key().name).collect();
    names.sort();
    assert_eq!(names, ["a", "c", "d"]);
    running.stop().await;
}
