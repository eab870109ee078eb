//! Members whose API access stalls: they own nothing from their local
//! deadline on, before anyone else owns their shards.

use k8s_openapi::api::core::v1::ConfigMap;
use tend::client::ClientError;
use tend::kube::KubeSource;
use tend::shard::Membership;
use tokio::time::Instant;

use super::*;
use membership_suite::shard;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_the_api_server_stops_owning_at_its_local_deadline() {
    let (client, ns) = setup("cut").await;
    let (proxy, through) = proxied().await;
    let a = member(through, &ns, "a");
    let b = member(client.clone(), &ns, "b");
    // The writer reaches the API server directly: only the membership is
    // cut off.
    let writer = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client_fenced_by(&a);
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(0)).await.unwrap();
    let mut map = ConfigMap::default();
    map.metadata.name = Some("x".into());
    map.metadata.namespace = Some(ns.clone());
    writer.fenced(token).create(map.clone()).await.unwrap();
    let waiting = tokio::spawn(async move {
        let token = b.acquire(shard(0)).await.unwrap();
        (b, Instant::now(), token)
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cut = Instant::now();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    let a_stopped = Instant::now();
    assert!(!a.is_member() && !a.is_current(token) && a.owned().is_empty());
    map.metadata.name = Some("y".into());
    let refused = writer.fenced(token).create(map).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { token: t }) if t == token),
        "{refused:?}"
    );
    let (_b, b_acquired, next) = within("b to take the shard", LIMIT, waiting).await.unwrap();
    eprintln!(
        "a stopped {:?} after the cut, b acquired {:?} after it",
        a_stopped - cut,
        b_acquired - cut
    );
    assert!(a_stopped < b_acquired, "a stopped before b owned the shard");
    assert!(a_stopped - cut <= fast().renew_deadline() + Duration::from_millis(300));
    assert!(next > token);
    proxy.blackhole(false);
    assert!(!a.is_current(token), "healed, its old token stays stale");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_client_keeps_no_dropped_member_renewing() {
    let (client, ns) = setup("fenced-drop").await;
    let a = member(client.clone(), &ns, "a");
    let b = member(client.clone(), &ns, "b");
    let writer = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client_fenced_by(&a);
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(1)).await.unwrap();
    let died = Instant::now();
    drop(a); // the writer lives on
    let next = within(
        "b takes the dropped member's shard",
        LIMIT,
        b.acquire(shard(1)),
    )
    .await
    .unwrap();
    assert!(next > token);
    assert!(
        died.elapsed() <= fast().lease() + Duration::from_secs(1),
        "the dropped member's Lease expired: nothing renewed it"
    );
    let mut map = ConfigMap::default();
    map.metadata.name = Some("late".into());
    map.metadata.namespace = Some(ns.clone());
    let refused = writer.fenced(token).create(map).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { token: t }) if t == token),
        "{refused:?}"
    );
}
