//! Replicas joining, leaving and expiring, and unsharded controllers.

use super::*;

#[tokio::test(start_paused = true)]
async fn replicas_reconcile_only_their_shards_and_hand_them_over_on_leave_and_join() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(64).expect("valid"));
    let store = items();
    let log = Log::default();
    let mut replicas: HashMap<&str, Replica> = ["r0", "r1", "r2"]
        .into_iter()
        .map(|name| (name, start(sharded(name, &group, &store, &log))))
        .collect();
    eventually("every key stamped by its owner of three", LIMIT, || {
        converged(&store, &group, &["r0", "r1", "r2"])
    })
    .await;
    check_log(&log);

    // r1 leaves: its shards go to the others, only once it released them.
    let r1_tokens: Vec<FencingToken> = log
        .lock()
        .iter()
        .filter(|r| r.replica == "r1")
        .filter_map(|r| r.token)
        .collect();
    replicas.remove("r1").expect("running").stop().await;
    eventually("every key stamped by its owner of two", LIMIT, || {
        converged(&store, &group, &["r0", "r2"])
    })
    .await;
    check_log(&log);

    // Its tokens are stale: a write with one is refused and changes nothing.
    assert_a_stale_token_is_refused(&store, &group, *r1_tokens.first().expect("r1 reconciled"))
        .await;

    // r3 joins while every replica is busy (every item changed): the
    // shards it takes are drained by their old owners before it acquires.
    touch_all(&store).await;
    let r3 = start(sharded("r3", &group, &store, &log));
    eventually(
        "every key stamped by its owner of three again",
        LIMIT,
        || converged(&store, &group, &["r0", "r2", "r3"]),
    )
    .await;
    check_log(&log);
    let owned = (0..64)
        .filter_map(|i| group.owner(group.shard_count().shard(i)?))
        .filter(|(owner, _)| owner.as_str() == "r3")
        .count();
    assert!((8..=36).contains(&owned), "r3 owns {owned} of 64 shards");

    r3.stop().await;
    for (_, replica) in replicas {
        replica.stop().await;
    }
}

#[tokio::test]
async fn an_unsharded_controller_on_a_sharded_manager_is_refused() {
    let group = MemoryMembershipGroup::new("items", ShardCount::DEFAULT);
    let store = items();
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(group.member("r0"), ShardCount::DEFAULT)
        .build()
        .expect("valid");
    let informer = manager
        .informer("items", || Informer::builder(store.clone()).build())
        .expect("registered");
    let stamp = Stamp {
        replica: "r0".to_owned(),
        group,
        log: Log::default(),
    };
    let controller = manager
        .controller("stamp", &informer, stamp)
        .build()
        .expect("valid");
    let added = manager.add_controller(controller);
    assert!(
        matches!(&added, Err(ManagerError::UnshardedController { controller }) if controller == "stamp"),
        "{added:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_membership_expires_stops_reconciling_and_fails() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let log = Log::default();
    let replica = start(sharded("r0", &group, &store, &log));
    eventually("every key stamped", LIMIT, || {
        converged(&store, &group, &["r0"])
    })
    .await;
    group.expire("r0");
    let ended = within("the replica's end", LIMIT, replica.run).await;
    assert!(
        matches!(ended.expect("not panicked"), Err(ManagerError::LostMembership { ref group }) if group == "items"),
    );
    check_log(&log);
}

/// A write fenced by the `stale` token is refused and changes nothing.
async fn assert_a_stale_token_is_refused(
    store: &MemoryStore<Item>,
    group: &MemoryMembershipGroup,
    stale: FencingToken,
) {
    let fenced: Client<Item> = store
        .client_fenced_by(&group.member("checker"))
        .fenced(stale);
    let before = store.get(&"item-0".to_owned()).expect("exists");
    let refused = fenced
        .update(Item {
            by: "late".to_owned(),
            ..Item::clone(&before)
        })
        .await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(store.get(&"item-0".to_owned()).expect("exists"), before);
}
