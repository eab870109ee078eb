//! Sharded controllers without a manager, and dropped shardings.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_sharded_controller_runs_in_the_harness_without_a_manager() {
    let store = store_of(40);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(8).expect("valid"));
    let informer = Informer::builder(store.clone()).build().expect("valid");
    let log = Log::default();
    let mut harness = Harness::new();
    harness.informer(&informer);
    for replica in ["r0", "r1"] {
        let sharding = Sharding::new(group.member(replica), group.shard_count())
            .handover_timeout(Duration::from_secs(1));
        harness.sharding(&sharding);
        let recorder = Recorder {
            replica,
            controller: "sharded",
            log: Arc::clone(&log),
        };
        let controller = Controller::builder(replica, &informer, recorder)
            .build()
            .expect("valid");
        harness.controller_with(controller, sharding.ownership());
    }
    let owners = |member: &str| {
        group
            .shard_count()
            .shards()
            .filter(|&shard| {
                group
                    .owner(shard)
                    .is_some_and(|(owner, _)| owner.as_str() == member)
            })
            .count()
    };
    eventually("each replica to own half the shards", LIMIT, || {
        owners("r0") == 4 && owners("r1") == 4
    })
    .await;
    harness.settle(LIMIT).await.expect("settled");
    for i in 0..40 {
        let key = format!("w{i:03}");
        let shard = group.shard_count().shard_of(&key);
        let (owner, token) = group.owner(shard).expect("owned");
        let last = log
            .lock()
            .iter()
            .rev()
            .find(|seen| seen.key == key)
            .cloned()
            .expect("reconciled");
        assert_eq!(last.replica, owner.as_str(), "{key}: by its shard's owner");
        assert_eq!(last.token, Some(token), "{key}: with its shard's token");
    }
    harness.shutdown().await.expect("clean");
    assert!(
        group
            .shard_count()
            .shards()
            .all(|shard| group.owner(shard).is_none()),
        "every shard handed over on shutdown"
    );
}

#[tokio::test(start_paused = true)]
async fn a_sharded_controller_runs_in_a_programs_own_main() {
    let store = store_of(10);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(4).expect("valid"));
    let sharding = Sharding::new(group.member("only"), group.shard_count());
    let informer = Informer::builder(store.clone()).build().expect("valid");
    let log = Log::default();
    let recorder = Recorder {
        replica: "only",
        controller: "sharded",
        log: Arc::clone(&log),
    };
    let controller = Controller::builder("sharded", &informer, recorder)
        .build()
        .expect("valid");
    let stop = CancellationToken::new();
    let env = Environment::new(stop.clone()).ownership(sharding.ownership());
    let watching = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    let following = tokio::spawn(sharding.clone().run(stop.clone()));
    let running = tokio::spawn(controller.run_in(env));
    eventually("every key reconciled with a shard token", LIMIT, || {
        let seen = log.lock();
        seen.len() >= 10 && seen.iter().all(|s| s.token.is_some())
    })
    .await;
    assert!(sharding.owns_any());
    stop.cancel();
    within("the controller", LIMIT, running)
        .await
        .expect("not panicked")
        .expect("clean");
    within("the sharding", LIMIT, following)
        .await
        .expect("not panicked")
        .expect("clean");
    within("the informer", LIMIT, watching)
        .await
        .expect("not panicked")
        .expect("clean");
    assert!(!sharding.owns_any(), "handed over");
}

#[tokio::test(start_paused = true)]
async fn a_sharding_whose_run_is_dropped_owns_nothing_any_more() {
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(4).expect("valid"));
    let sharding = Sharding::new(group.member("r0"), group.shard_count());
    let running = tokio::spawn(sharding.clone().run(CancellationToken::new()));
    eventually("shards owned", LIMIT, || sharding.owns_any()).await;
    running.abort();
    let _ = running.await;
    assert!(!sharding.owns_any(), "dropped: every shard lost here");
}
