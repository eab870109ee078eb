//! `KubeSource`'s lists on a real API server: through the watch stream
//! (WatchList) where the server streams, in pages where it does not.

#[path = "support/kube.rs"]
mod kube_support;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, VersionMatch};
use kube_support::{config_map, fresh};
use support::within;
use tend::kube::{KubeSource, ListMode};
use tend::testing::kube::ControlPlane;
use tend::{Object, ObjectKey, Source};

const LIMIT: Duration = Duration::from_secs(60);

/// What the server stores at revision `at`: name → resourceVersion.
async fn stored_at(client: &kube::Client, ns: &str, at: u64) -> BTreeMap<String, String> {
    let params = ListParams::default()
        .at(&at.to_string())
        .matching(VersionMatch::Exact);
    let maps = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&params)
        .await
        .expect("a list at the snapshot's revision");
    maps.items
        .into_iter()
        .map(|m| {
            (
                m.key().name,
                m.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

fn versions(objects: &[ConfigMap]) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|m| {
            (
                m.key().name,
                m.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Creates and deletes maps `w-*` in `ns` until the token is cancelled.
fn churn(client: kube::Client, ns: String) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        let maps = KubeSource::<ConfigMap>::namespaced(client, &ns).client();
        let mut writes = 0;
        for round in 0u32..2_000 {
            let name = format!("w-{}", round % 40);
            let written = if round % 80 < 40 {
                maps.create(config_map(&ns, &name, &[("n", "1")]))
                    .await
                    .map(|_| ())
            } else {
                let key = ObjectKey::new(ns.clone(), name);
                maps.delete(&key).await.map(|_| ())
            };
            if written.is_ok() {
                writes += 1;
            }
            if writes >= 200 {
                break;
            }
        }
        writes
    })
}

#[tokio::test]
async fn a_streamed_list_is_what_the_server_stored_at_its_bookmark_while_writes_go_on() {
    let (client, ns) = fresh("lists-streamed").await;
    let source = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns);
    let maps = source.client();
    for i in 0..300 {
        maps.create(config_map(&ns, &format!("m-{i}"), &[("n", "1")]))
            .await
            .expect("created");
    }
    let writer = churn(client.clone(), ns.clone());
    let mut lists = 0;
    let started = std::time::Instant::now();
    while !writer.is_finished() || lists == 0 {
        assert!(
            started.elapsed() < LIMIT,
            "the writer did not finish within {LIMIT:?}"
        );
        let snapshot = within("a streamed list", LIMIT, source.list())
            .await
            .expect("listed");
        assert!(
            source.streams_lists(),
            "this API server cannot stream lists (its etcd must be 3.4.31+ or 3.5.13+): \
             point TEND_ETCD_BIN at a newer etcd, as .ci/run does"
        );
        let at = snapshot.revision.get();
        let (listed, stored) = (
            versions(&snapshot.objects),
            stored_at(&client, &ns, at).await,
        );
        let differ: Vec<_> = listed
            .iter()
            .filter(|(name, version)| stored.get(*name) != Some(version))
            .chain(
                stored
                    .iter()
                    .filter(|(name, _)| !listed.contains_key(*name)),
            )
            .collect();
        assert!(
            differ.is_empty(),
            "the streamed list is the server's state at its revision {at}; these differ: {differ:?}"
        );
        lists += 1;
    }
    let writes = within("the writer", LIMIT, writer)
        .await
        .expect("the writer");
    assert!(writes >= 200, "the lists ran beside {writes} writes");
}

#[tokio::test]
async fn paged_lists_stay_available_by_choice() {
    let (client, ns) = fresh("lists-paged").await;
    let source = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns)
        .list_mode(ListMode::Paged)
        .page_size(std::num::NonZeroU32::new(7).expect("not zero"));
    let maps = source.client();
    for i in 0..30 {
        maps.create(config_map(&ns, &format!("m-{i}"), &[]))
            .await
            .expect("created");
    }
    assert!(!source.streams_lists(), "paged by choice");
    let snapshot = source.list().await.expect("listed");
    assert_eq!(snapshot.objects.len(), 30);
    let at = snapshot.revision.get();
    assert_eq!(
        versions(&snapshot.objects),
        stored_at(&client, &ns, at).await
    );
}

#[tokio::test]
async fn a_server_that_does_not_stream_is_listed_in_pages_and_not_asked_again() {
    let plane = ControlPlane::builder()
        .apiserver_arg("--feature-gates=WatchList=false")
        .start()
        .await
        .expect("an API server that does not stream lists");
    pages_after_a_refusal(&plane).await;
}

/// Debian 12's etcd (3.4.23) lacks the progress requests streaming needs:
/// the API server answers `500` ("RequestWatchProgress is disabled").
/// `TEND_OLD_ETCD_BIN` names such an etcd (default `/usr/bin/etcd`, which
/// `.ci/run` installs).
#[tokio::test]
async fn a_server_whose_etcd_cannot_stream_is_listed_in_pages() {
    let old = std::env::var("TEND_OLD_ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into());
    assert!(
        std::path::Path::new(&old).exists(),
        "{old} is missing: `apt-get install -y etcd-server` (3.4), or set TEND_OLD_ETCD_BIN"
    );
    let plane = ControlPlane::builder()
        .etcd_binary(old)
        .start()
        .await
        .expect("an API server over an etcd that cannot stream");
    pages_after_a_refusal(&plane).await;
}

/// On a plane that cannot stream lists: a list is made in pages, and the
/// refusal is remembered.
async fn pages_after_a_refusal(plane: &ControlPlane) {
    let client = plane.client().await.expect("a client");
    let ns = plane
        .create_namespace(&client, "no-stream")
        .await
        .expect("a namespace");
    let source = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns);
    let maps = source.client();
    for i in 0..12 {
        maps.create(config_map(&ns, &format!("m-{i}"), &[]))
            .await
            .expect("created");
    }
    assert!(source.streams_lists(), "streaming is the default");
    let snapshot = source.list().await.expect("listed in pages");
    assert!(!source.streams_lists(), "the refusal is remembered");
    assert!(
        !source.clone().streams_lists(),
        "and shared with the source's clones"
    );
    let at = snapshot.revision.get();
    assert_eq!(
        versions(&snapshot.objects),
        stored_at(&client, &ns, at).await
    );
    assert_eq!(snapshot.objects.len(), 12);
}

/// A map without its data and managed fields.
fn stripped(mut map: ConfigMap) -> ConfigMap {
    map.data = None;
    map.metadata.managed_fields = None;
    map
}

#[tokio::test]
async fn a_transform_applies_to_every_object_listed_either_way_and_watched() {
    use tend::{Informer, InformerError};
    let (client, ns) = fresh("lists-transform").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    for i in 0..20 {
        maps.create(config_map(&ns, &format!("m-{i}"), &[("big", "x")]))
            .await
            .expect("created");
    }
    for mode in [ListMode::Streaming, ListMode::Paged] {
        let source = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns)
            .list_mode(mode)
            .page_size(std::num::NonZeroU32::new(6).expect("not zero"));
        let informer_source = source.clone();
        let informer = Informer::builder(source)
            .transform(stripped)
            .build()
            .expect("an informer");
        let stop = tokio_util::sync::CancellationToken::new();
        let running = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        within("the sync", LIMIT, informer.wait_synced(LIMIT))
            .await
            .expect("synced");
        let streamed = mode == ListMode::Streaming;
        assert_eq!(
            informer_source.streams_lists(),
            streamed,
            "{mode:?}: listed as asked"
        );
        maps.create(config_map(
            &ns,
            &format!("late-{mode:?}").to_lowercase(),
            &[("big", "x")],
        ))
        .await
        .expect("created");
        within("the late map", LIMIT, async {
            while informer.cache().len() < 21 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let cached = informer.cache().list();
        let all = cached
            .iter()
            .all(|map| **map == stripped(ConfigMap::clone(map)));
        assert!(all, "{mode:?}: every cached map went through the transform");
        stop.cancel();
        let ran: Result<(), InformerError> = running.await.expect("joined");
        ran.expect("the informer ran");
    }
}
