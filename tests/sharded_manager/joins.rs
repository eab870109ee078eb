//! What a join reconciles, and keys deleted between owners.

use super::*;

/// Waits until no reconcile has been logged for a second (of the paused
/// clock): the writes' own events have been reconciled too.
async fn quiet(log: &Log) {
    within("the replicas to go quiet", LIMIT, async {
        loop {
            let logged = log.lock().len();
            tokio::time::sleep(Duration::from_secs(1)).await;
            if log.lock().len() == logged {
                break;
            }
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_join_reconciles_only_the_keys_of_the_shards_it_moved() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(64).expect("valid"));
    let store = items();
    let log = Log::default();
    let three = ["r0", "r1", "r2"];
    let mut replicas: Vec<Replica> = three
        .iter()
        .map(|name| start(sharded(name, &group, &store, &log)))
        .collect();
    eventually("every key stamped by its owner of three", LIMIT, || {
        converged(&store, &group, &three)
    })
    .await;
    quiet(&log).await;
    let before = log.lock().len();
    replicas.push(start(sharded("r3", &group, &store, &log)));
    let four = ["r0", "r1", "r2", "r3"];
    eventually("every key stamped by its owner of four", LIMIT, || {
        converged(&store, &group, &four)
    })
    .await;
    quiet(&log).await;
    check_log(&log);

    let old = Assignment::compute(three, group.shard_count());
    let new = Assignment::compute(four, group.shard_count());
    let moved: Vec<_> = old.moved(&new).collect();
    let share = new.shards_of("r3").count();
    // The joiner's share (16 of 64, bounded loads) and a few shards moved
    // between the others as their room shrank.
    assert_eq!(share, 16);
    assert!(
        (share..=share + 18).contains(&moved.len()),
        "{} of 64 shards moved",
        moved.len()
    );
    let after = log.lock()[before..].to_vec();
    assert!(!after.is_empty(), "the moved shards' keys were reconciled");
    for record in &after {
        let shard = group.shard_count().shard_of(&record.key);
        assert!(
            moved.contains(&shard),
            "{record:?}: a key whose shard did not move was reconciled again"
        );
        assert_eq!(
            Some(record.replica.as_str()),
            new.owner(shard).map(MemberId::as_str),
            "{record:?} ran off its shard's new owner"
        );
    }
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_deleted_while_its_shard_is_between_owners_is_reconciled_by_the_new_owner() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(8).expect("valid"));
    let store = items();
    let (log, cancelled) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
    let held = moving_key(&group);
    let shard = group.shard_count().shard_of(&held);
    let gone = (0..KEYS)
        .map(|i| format!("item-{i}"))
        .find(|key| *key != held && group.shard_count().shard_of(key) == shard)
        .expect("another key of the moving shard");
    let (open, gate) = tokio::sync::watch::channel(false);
    let parts = (&log, &cancelled);
    let handover = Duration::from_secs(60);
    let (r0, r1) = join_while_held((&group, &store), (&held, &gate), parts, handover).await;
    // r0 drains the shard (its reconcile of `held` is in flight), so
    // neither replica owns it: the deletion passes both filters.
    tokio::time::sleep(Duration::from_millis(500)).await;
    store.client().delete(&gone).await.expect("deleted");
    tokio::time::sleep(Duration::from_millis(500)).await;
    open.send(true).expect("replicas listen");
    eventually("the new owner reconciles the deleted key", LIMIT, || {
        log.lock()
            .iter()
            .any(|r| r.replica == "r1" && r.key == gone && r.deleted)
    })
    .await;
    r1.stop().await;
    r0.stop().await;
}
