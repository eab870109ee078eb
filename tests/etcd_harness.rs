//! The etcd test harness itself: servers started side by side stay apart,
//! and a proxy's partition heals without corrupting the connection.

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

use std::collections::HashSet;
use std::time::Duration;

use tend::testing::etcd::EtcdServer;

use support::{client, server, through_proxy, within};

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_started_together_get_their_own_ports_and_data() {
    let servers = within("four servers", Duration::from_secs(60), async {
        tokio::try_join!(
            EtcdServer::start(),
            EtcdServer::start(),
            EtcdServer::start(),
            EtcdServer::start(),
        )
    })
    .await
    .expect("every server starts");
    let servers = [servers.0, servers.1, servers.2, servers.3];
    let addresses: HashSet<_> = servers.iter().map(EtcdServer::address).collect();
    assert_eq!(addresses.len(), servers.len(), "distinct client ports");
    for (i, server) in servers.iter().enumerate() {
        let mut kv = client(server).await;
        kv.put("owner", i.to_string(), None).await.unwrap();
    }
    for (i, server) in servers.iter().enumerate() {
        let mut kv = client(server).await;
        let owner = kv.get("owner", None).await.unwrap();
        assert_eq!(owner.kvs()[0].value_str().unwrap(), i.to_string());
        let members = kv.member_list().await.unwrap();
        assert_eq!(members.members().len(), 1, "a cluster of one");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_into_a_blackhole_completes_after_the_heal() {
    let etcd = server().await;
    let (proxy, mut kv) = through_proxy(&etcd).await;
    kv.put("before", "1", None).await.unwrap();
    proxy.blackhole(true);
    let pending = tokio::spawn({
        let mut kv = kv.clone();
        async move { kv.put("during", "2", None).await }
    });
    // Shorter than the client's keep-alive interval: the connection stays.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "nothing passes while blackholed");
    proxy.blackhole(false);
    within("the held request to complete", LIMIT, pending)
        .await
        .unwrap()
        .expect("the request lands after the heal");
    let after = within("a request after the heal", LIMIT, kv.get("during", None))
        .await
        .unwrap();
    assert_eq!(after.kvs()[0].value_str().unwrap(), "2");
}
