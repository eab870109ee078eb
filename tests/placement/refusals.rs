//! Placements refused when registered.

use super::*;

#[tokio::test]
async fn placements_the_manager_cannot_honour_are_refused_when_registered() {
    let store = store_of(1);
    let mut plain = Manager::builder().without_signals().build().expect("valid");
    let informer = plain
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let recorder = || Recorder {
        replica: "r",
        controller: "c",
        log: Log::default(),
    };
    let build = |name: &str, manager: &Manager| {
        manager
            .controller(name, &informer, recorder())
            .build()
            .expect("valid")
    };
    let leader = build("leader", &plain);
    assert!(matches!(
        plain.add_controller_on(leader, Placement::Leader),
        Err(ManagerError::NoElection { runnable }) if runnable == "leader"
    ));
    let sharded = build("sharded", &plain);
    assert!(matches!(
        plain.add_sharded_controller(sharded),
        Err(ManagerError::NoMembership { runnable }) if runnable == "sharded"
    ));
    let task = plain.add_task_on("t", Placement::Leader, |_| async { Ok(()) });
    assert!(matches!(task, Err(ManagerError::NoElection { runnable }) if runnable == "t"));
    let task = plain.add_task_on("t", Placement::Sharded, |_| async { Ok(()) });
    assert!(matches!(task, Err(ManagerError::ShardedTask { task }) if task == "t"));
    let everywhere = build("everywhere", &plain);
    plain
        .add_controller_on(everywhere, Placement::Everywhere)
        .expect("everywhere needs nothing");
}

#[tokio::test]
async fn a_fenced_placement_with_a_client_that_cannot_be_fenced_is_refused() {
    let store = store_of(1);
    let election = MemoryElectionGroup::new("lock");
    let candidate = election.candidate();
    let fenced_client = store.client_fenced_by(&candidate);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(4).expect("valid"));
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(candidate)
        .sharding(group.member("r0"), group.shard_count())
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    for placement in [Placement::Leader, Placement::Sharded] {
        let name = format!("{placement}");
        let controller = manager
            .controller(&name, &informer, unlogged_recorder())
            .client(store.client())
            .build()
            .expect("valid");
        let added = manager.add_controller_on(controller, placement);
        assert!(
            matches!(&added, Err(ManagerError::UnfencedClient { controller, object_type })
                if *controller == name && object_type.ends_with("Widget")),
            "{placement}: {added:?}"
        );
    }
    // Fenced by the election, it is accepted; unfenced, it may run everywhere.
    let fenced = manager
        .controller("leader", &informer, unlogged_recorder())
        .client(fenced_client)
        .build()
        .expect("valid");
    manager
        .add_controller_on(fenced, Placement::Leader)
        .expect("fenced");
    let everywhere = manager
        .controller("everywhere", &informer, unlogged_recorder())
        .client(store.client())
        .build()
        .expect("valid");
    manager
        .add_controller_on(everywhere, Placement::Everywhere)
        .expect("no token to fence");
}

/// A recorder whose log nobody reads.
fn unlogged_recorder() -> Recorder {
    Recorder {
        replica: "r",
        controller: "c",
        log: Log::default(),
    }
}
