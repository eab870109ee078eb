//! Sharded, leader-only and everywhere controllers side by side.

use super::*;

#[tokio::test(start_paused = true)]
async fn one_manager_runs_sharded_leader_only_and_everywhere_controllers_side_by_side() {
    let store = store_of(64);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(16).expect("valid"));
    let election = MemoryElectionGroup::new("widgets-lock");
    let log = Log::default();
    let r0 = mixed("r0", &store, &group, &election, &log);
    eventually(
        "r0 to reconcile every key in each controller",
        LIMIT,
        || {
            ["sharded", "leader", "everywhere"]
                .iter()
                .all(|c| keys(&log, "r0", c).len() >= 64)
        },
    )
    .await;
    let r1 = mixed("r1", &store, &group, &election, &log);
    eventually("r1 to run everywhere and own some shards", LIMIT, || {
        keys(&log, "r1", "everywhere").len() == 64 && !keys(&log, "r1", "sharded").is_empty()
    })
    .await;
    assert!(
        keys(&log, "r1", "leader").is_empty(),
        "a standby runs no leader-only reconcile"
    );
    // Every reconcile carries the token its placement gives it.
    for seen in log.lock().iter() {
        match seen.controller {
            "everywhere" => assert_eq!(seen.token, None, "{seen:?}"),
            "leader" => assert_eq!(seen.token, Some(FencingToken::new(1)), "{seen:?}"),
            _ => assert!(seen.token.is_some(), "{seen:?}"),
        }
    }
    // r1's sharded reconciles are of its own shards only.
    for key in keys(&log, "r1", "sharded") {
        let shard = group.shard_count().shard_of(&key);
        let owner = group.owner(shard).map(|(owner, _)| owner.to_string());
        assert_eq!(owner.as_deref(), Some("r1"), "{key} reconciled by r1");
    }
    r1.stop().await;
    r0.stop().await;
}
