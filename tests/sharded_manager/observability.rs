//! Debug shards, metrics and released shards' tokens.

use super::*;

/// The only replica, `r0`, of `group` (16 shards) over `store`, serving
/// HTTP, its `stamp` controller's writes fenced by the shards' tokens; once
/// it is ready (every shard owned).
async fn serving(
    group: &MemoryMembershipGroup,
    store: &MemoryStore<Item>,
) -> (Replica, std::net::SocketAddr) {
    let member = group.member("r0");
    let fenced = store.client_fenced_by(&member);
    let mut manager = Manager::builder()
        .without_signals()
        .http_address("127.0.0.1:0".parse().expect("an address"))
        .sharding(member, group.shard_count())
        .build()
        .expect("valid");
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("items", || Informer::builder(store.clone()).build())
        .expect("registered");
    let stamp = Stamp {
        replica: "r0".to_owned(),
        group: group.clone(),
        log: Log::default(),
    };
    let controller = manager
        .controller("stamp", &informer, stamp)
        .client(fenced)
        .build()
        .expect("valid");
    manager.add_sharded_controller(controller).expect("added");
    let replica = start(manager);
    let limit = Duration::from_secs(10);
    eventually("every shard owned", limit, || {
        group
            .shard_count()
            .shards()
            .all(|shard| group.owner(shard).is_some())
    })
    .await;
    let ready = within("ready", limit, async {
        loop {
            if http::get(address, "/readyz").await.status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    ready.await;
    (replica, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_shards_and_the_metrics_show_the_ownership() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let (replica, address) = serving(&group, &store).await;
    let shards = http::get(address, "/debug/shards").await;
    assert_eq!(shards.status, 200);
    let report: serde_json::Value = serde_json::from_str(&shards.body).expect("JSON");
    assert_eq!(report["member"], "r0");
    assert_eq!(report["members"], serde_json::json!(["r0"]));
    assert_eq!(report["assigned"].as_array().map(Vec::len), Some(16));
    let owned = report["owned"].as_array().expect("owned shards");
    assert_eq!(owned.len(), 16);
    let token = FencingToken::new(owned[0]["token"].as_u64().expect("a token"));
    let shard = group.shard_count().shard(0).expect("a shard");
    assert_eq!(group.owner(shard).map(|(_, t)| t), Some(token));
    let metrics = http::Exposition::parse(&http::get(address, "/metrics").await.body);
    assert_eq!(
        metrics.value("tend_shards_owned", &[("name", "items")]),
        Some(16.0)
    );
    // One acquisition observed per shard gained.
    let acquisitions = "tend_shard_acquisition_duration_seconds_count";
    assert_eq!(
        metrics.value(acquisitions, &[("name", "items")]),
        Some(16.0)
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_with_a_released_shards_token_are_refused_and_counted_in_the_metrics() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let (replica, address) = serving(&group, &store).await;
    let limit = Duration::from_secs(10);
    eventually("every item stamped", limit, || {
        converged(&store, &group, &["r0"])
    })
    .await;
    let refused = "tend_controller_fenced_writes_refused_total";
    let stamp = [("controller", "stamp")];
    let scrape = || async { http::Exposition::parse(&http::get(address, "/metrics").await.body) };
    assert_eq!(
        scrape().await.value(refused, &stamp),
        Some(0.0),
        "exported from the start, none refused while owned"
    );

    // The shard's ownership ends behind the replica's back (as an etcd
    // ownership record deleted by hand): it still reconciles the shard's
    // keys, with a token no longer current.
    let key = "item-0".to_owned();
    let shard = group.shard_count().shard_of(&key);
    let (_, token) = group.owner(shard).expect("owned");
    // A second handle of the replica's member; dropping it would leave.
    let r0 = group.member("r0");
    r0.release(shard, token).await.expect("released");
    let item = store.get(&key).expect("exists");
    let cleared = Item {
        by: String::new(),
        ..Item::clone(&item)
    };
    store.client().update(cleared).await.expect("cleared");
    within("a refused write counted", limit, async {
        while scrape().await.value(refused, &stamp).unwrap_or_default() < 1.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let after = store.get(&key).expect("exists");
    assert_eq!(after.by, "", "the refused writes changed nothing");
    replica.stop().await;
    drop(r0);
}
