//! Restarted and killed API servers, and compaction.

use super::*;

#[tokio::test]
async fn a_restarted_apiserver_keeps_its_data_port_and_clients_and_forgets_its_watch_cache() {
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "restart")
        .await
        .expect("a namespace");
    let version = create_config_map(&client, &namespace, "kept", "across restarts").await;
    // A change after `version`, so that the new cache cannot serve it.
    create_config_map(&client, &namespace, "later", "too").await;
    let (url, pid) = (plane.url(), plane.apiserver_pid());

    within(
        "a restart",
        Duration::from_secs(90),
        plane.restart_apiserver(),
    )
    .await
    .expect("the API server restarts");
    assert_eq!(plane.url(), url, "the same port");
    assert_ne!(plane.apiserver_pid(), pid, "a new process");
    assert_eq!(
        value_of(&client, &namespace, "kept").await,
        "across restarts"
    );
    // The new watch cache starts at etcd's current revision, after the
    // change that followed `version`.
    assert_expired(&first_event(&client, &namespace, &version).await);
}

#[tokio::test]
async fn a_killed_apiserver_refuses_clients_until_started_again() {
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "killed")
        .await
        .expect("a namespace");
    plane.kill_apiserver();
    assert_eq!(plane.apiserver_pid(), None);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let refused = within("a refused list", LIMIT, api.list(&Default::default())).await;
    assert!(refused.is_err(), "no API server answers");

    within("a start", Duration::from_secs(90), plane.start_apiserver())
        .await
        .expect("the API server starts again");
    create_config_map(&client, &namespace, "later", "served").await;
}

#[tokio::test]
async fn compaction_expires_watches_from_older_versions_without_the_watch_cache() {
    let plane = plane(ControlPlane::builder().apiserver_arg("--watch-cache=false")).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "compact")
        .await
        .expect("a namespace");
    let old = create_config_map(&client, &namespace, "old", "1").await;
    create_config_map(&client, &namespace, "new", "2").await;
    // Compaction at revision R keeps R: a watch from `old` needs the
    // revision of `new`, which this later change puts before R.
    create_config_map(&client, &namespace, "newest", "3").await;
    // Before compaction, the old version replays what came after it.
    assert!(matches!(
        first_event(&client, &namespace, &old).await,
        WatchEvent::Added(_)
    ));

    let revision = plane.compact_etcd().await.expect("etcd compacts");
    assert!(
        revision > old.parse().unwrap(),
        "compacted at {revision}, after {old}"
    );
    assert_expired(&first_event(&client, &namespace, &old).await);
    // Compacting again at the same revision is no error.
    plane.compact_etcd().await.expect("compacting twice");
}

#[tokio::test]
async fn compaction_leaves_watches_served_from_the_watch_cache_alone() {
    // What the module docs say of v1.36.2: the watch cache, not etcd,
    // answers a watch from a compacted version that is still in its window.
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "cached")
        .await
        .expect("a namespace");
    let old = create_config_map(&client, &namespace, "old", "1").await;
    create_config_map(&client, &namespace, "new", "2").await;
    plane.compact_etcd().await.expect("etcd compacts");
    match first_event(&client, &namespace, &old).await {
        WatchEvent::Added(config_map) => assert_eq!(config_map.metadata.name.unwrap(), "new"),
        other => panic!("expected the cached event, got {other:?}"),
    }
}
