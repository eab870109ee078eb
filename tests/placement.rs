//! Placement per runnable: one manager with sharded, leader-only and
//! everywhere runnables; warm standbys; leader-only tasks; the placements
//! a manager cannot honour refused at registration.

#[path = "support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::Informer;
use tend::client::FencingToken;
use tend::controller::{Action, Context, Controller, Environment, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryMembershipGroup;
use tend::memory::MemoryStore;
use tend::placement::{Placement, Sharding};
use tend::shard::ShardCount;
use tend::testing::Harness;
use tokio_util::sync::CancellationToken;

use widgets::{Widget, eventually, widgets, within};

const LIMIT: Duration = Duration::from_secs(60);

/// One reconcile: replica, controller, key, token, and whether it saw a
/// deleted object's last state.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    replica: &'static str,
    controller: &'static str,
    key: String,
    token: Option<FencingToken>,
    deleted: bool,
}

type Log = Arc<Mutex<Vec<Seen>>>;

#[derive(Clone)]
struct Recorder {
    replica: &'static str,
    controller: &'static str,
    log: Log,
}

impl Reconciler<Widget> for Recorder {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        self.log.lock().push(Seen {
            replica: self.replica,
            controller: self.controller,
            key: ctx.key().clone(),
            token: ctx.fencing_token(),
            deleted: ctx.deleted().is_some(),
        });
        Ok(Action::Done)
    }
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("w{i:03}")).collect()
}

fn store_of(count: usize) -> MemoryStore<Widget> {
    let names = names(count);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    widgets(&refs)
}

/// The reconciles of `controller` on `replica` so far, as keys.
fn keys(log: &Log, replica: &str, controller: &str) -> Vec<String> {
    log.lock()
        .iter()
        .filter(|s| s.replica == replica && s.controller == controller)
        .map(|s| s.key.clone())
        .collect()
}

struct Replica {
    stop: CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

impl Replica {
    async fn stop(self) {
        self.stop.cancel();
        within("the replica to stop", LIMIT, self.run)
            .await
            .expect("not panicked")
            .expect("a clean stop");
    }
}

/// A manager with a membership and an election, running a sharded
/// controller, a leader-only one and one everywhere over `store`.
fn mixed(
    replica: &'static str,
    store: &MemoryStore<Widget>,
    group: &MemoryMembershipGroup,
    election: &MemoryElectionGroup,
    log: &Log,
) -> Replica {
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(group.member(replica), group.shard_count())
        .leader_election(election.candidate())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    for (controller, placement) in [
        ("sharded", Placement::Sharded),
        ("leader", Placement::Leader),
        ("everywhere", Placement::Everywhere),
    ] {
        let recorder = Recorder {
            replica,
            controller,
            log: Arc::clone(log),
        };
        let built = manager
            .controller(controller, &informer, recorder)
            .build()
            .expect("valid");
        manager.add_controller_on(built, placement).expect("placed");
    }
    let stop = manager.shutdown_token();
    Replica {
        stop,
        run: tokio::spawn(manager.run()),
    }
}

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

/// A manager with only an election, a leader-only controller over `store`.
fn elected(
    replica: &'static str,
    store: &MemoryStore<Widget>,
    election: &MemoryElectionGroup,
    log: &Log,
) -> Replica {
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election.candidate())
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let recorder = Recorder {
        replica,
        controller: "leader",
        log: Arc::clone(log),
    };
    let controller = manager
        .controller("leader", &informer, recorder)
        .build()
        .expect("valid");
    manager
        .add_controller(controller)
        .expect("leader-only by default");
    let stop = manager.shutdown_token();
    Replica {
        stop,
        run: tokio::spawn(manager.run()),
    }
}

#[tokio::test(start_paused = true)]
async fn a_delete_seen_while_standing_by_is_reconciled_with_its_last_state_after_winning() {
    let store = store_of(3);
    let election = MemoryElectionGroup::new("widgets-lock");
    let log = Log::default();
    let leader = elected("leader", &store, &election, &log);
    eventually("the leader to reconcile", LIMIT, || {
        keys(&log, "leader", "leader").len() == 3
    })
    .await;
    let standby = elected("standby", &store, &election, &log);
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Seen by both; the leader handles it, the standby keeps it queued.
    let key = "w001".to_owned();
    store.client().delete(&key).await.expect("deleted");
    eventually("the leader to reconcile the delete", LIMIT, || {
        log.lock()
            .iter()
            .any(|s| s.replica == "leader" && s.key == key && s.deleted)
    })
    .await;
    assert!(keys(&log, "standby", "leader").is_empty(), "standing by");

    leader.stop().await;
    eventually("the new leader to reconcile the delete", LIMIT, || {
        log.lock()
            .iter()
            .any(|s| s.replica == "standby" && s.key == key && s.deleted)
    })
    .await;
    let reconciled = keys(&log, "standby", "leader");
    assert_eq!(reconciled.len(), 3, "each queued key once: {reconciled:?}");
    standby.stop().await;
}

#[tokio::test(start_paused = true)]
async fn leader_only_tasks_start_on_winning_stop_on_losing_and_start_again() {
    let election = MemoryElectionGroup::new("lock");
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election.candidate())
        .campaign_again(true)
        .build()
        .expect("valid");
    let seen = Arc::clone(&events);
    manager
        .add_task_on(
            "singleton",
            Placement::Leader,
            move |stop: CancellationToken| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().push("started".to_owned());
                    stop.cancelled().await;
                    seen.lock().push("stopped".to_owned());
                    Ok(())
                }
            },
        )
        .expect("placed");
    let leadership = manager.leadership().expect("elected").clone();
    let stop = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the task to start", LIMIT, || events.lock().len() == 1).await;
    assert!(leadership.is_leader());

    // A rival takes over: the task stops; this replica stands by.
    election.depose();
    let rival = election.candidate();
    let won = within(
        "the rival's campaign",
        LIMIT,
        tend::election::LeaderElector::campaign(&rival),
    )
    .await;
    assert!(won.is_ok());
    eventually("the task to stop", LIMIT, || events.lock().len() == 2).await;
    assert!(!leadership.is_leader());
    assert!(!run.is_finished(), "standing by, not failed");

    drop(rival); // resigns: this replica wins again
    eventually("the task to start again", LIMIT, || {
        events.lock().len() == 3
    })
    .await;
    assert_eq!(*events.lock(), ["started", "stopped", "started"]);
    stop.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
    assert_eq!(events.lock().last().map(String::as_str), Some("stopped"));
}

#[tokio::test(start_paused = true)]
async fn a_lost_leadership_fails_run_and_stops_leader_only_tasks_by_default() {
    let election = MemoryElectionGroup::new("lock");
    let stopped = Arc::new(Mutex::new(false));
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election.candidate())
        .build()
        .expect("valid");
    let flag = Arc::clone(&stopped);
    manager
        .add_task_on(
            "singleton",
            Placement::Leader,
            move |stop: CancellationToken| {
                let flag = Arc::clone(&flag);
                async move {
                    stop.cancelled().await;
                    *flag.lock() = true;
                    Ok(())
                }
            },
        )
        .expect("placed");
    let leadership = manager.leadership().expect("elected").clone();
    let run = tokio::spawn(manager.run());
    eventually("leading", LIMIT, || leadership.is_leader()).await;
    election.depose();
    let ended = within("run to fail", LIMIT, run)
        .await
        .expect("not panicked");
    assert!(
        matches!(&ended, Err(ManagerError::LostLeadership { election }) if election == "lock"),
        "{ended:?}"
    );
    assert!(*stopped.lock(), "the leader-only task was stopped");
}

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
            .controller(
                &name,
                &informer,
                Recorder {
                    replica: "r",
                    controller: "c",
                    log: Log::default(),
                },
            )
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
        .controller(
            "leader",
            &informer,
            Recorder {
                replica: "r",
                controller: "c",
                log: Log::default(),
            },
        )
        .client(fenced_client)
        .build()
        .expect("valid");
    manager
        .add_controller_on(fenced, Placement::Leader)
        .expect("fenced");
    let everywhere = manager
        .controller(
            "everywhere",
            &informer,
            Recorder {
                replica: "r",
                controller: "c",
                log: Log::default(),
            },
        )
        .client(store.client())
        .build()
        .expect("valid");
    manager
        .add_controller_on(everywhere, Placement::Everywhere)
        .expect("no token to fence");
}

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
