//! Leader-only controllers and tasks winning and losing.

use super::*;

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
