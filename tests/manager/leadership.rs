//! Standbys, takeovers and losing the leadership.

use super::*;

/// A manager over its own informer of `store`, elected through `election`.
fn replica(
    store: &MemoryStore<Widget>,
    election: &MemoryElectionGroup,
    recorder: Recorder,
) -> Manager {
    let mut manager = manager()
        .leader_election(election.candidate())
        .build()
        .unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, recorder)
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    manager
}

#[tokio::test(start_paused = true)]
async fn a_standby_never_reconciles_and_takes_over_when_the_leader_resigns() {
    let store = widgets(&["a"]);
    let election = MemoryElectionGroup::new("widgets-lock");
    let log = Log::default();
    let leader = replica(&store, &election, Recorder::new("leader", &log));
    let stop_leader = leader.shutdown_token();
    let leader = tokio::spawn(leader.run());
    eventually("the leader to reconcile", LIMIT, || {
        count(&log, "leader a") == 1
    })
    .await;

    let standby_recorder = Recorder::new("standby", &log);
    let tokens = Arc::clone(&standby_recorder.tokens);
    let standby = replica(&store, &election, standby_recorder);
    let stop_standby = standby.shutdown_token();
    let standby = tokio::spawn(standby.run());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(count(&log, "standby a"), 0, "a standby never reconciles");
    assert_eq!(
        store.stats().lists,
        2,
        "the standby's informer runs (warm standby)"
    );

    stop("the leader to stop", &stop_leader, leader).await;
    eventually("the standby to take over", LIMIT, || {
        count(&log, "standby a") == 1
    })
    .await;
    assert_eq!(
        *tokens.lock(),
        [Some(FencingToken::new(2))],
        "the new leader's fencing token"
    );
    stop("the standby to stop", &stop_standby, standby).await;
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_when_the_leader_is_dropped() {
    let store = widgets(&["a"]);
    let election = MemoryElectionGroup::new("widgets-lock");
    let log = Log::default();
    let leader = replica(&store, &election, Recorder::new("leader", &log));
    let leader = tokio::spawn(leader.run());
    eventually("the leader to reconcile", LIMIT, || {
        count(&log, "leader a") == 1
    })
    .await;
    let standby = replica(&store, &election, Recorder::new("standby", &log));
    let stop_standby = standby.shutdown_token();
    let standby = tokio::spawn(standby.run());
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(count(&log, "standby a"), 0);

    leader.abort();
    assert!(leader.await.unwrap_err().is_cancelled());
    eventually("the standby to take over", LIMIT, || {
        count(&log, "standby a") == 1
    })
    .await;
    assert_eq!(election.leader_token(), Some(FencingToken::new(2)));
    stop("the standby to stop", &stop_standby, standby).await;
}

#[tokio::test(start_paused = true)]
async fn losing_the_leadership_cancels_in_flight_reconciles_and_fails_run() {
    let store = widgets(&["stuck"]);
    let election = MemoryElectionGroup::new("widgets-lock");
    let log = Log::default();
    let recorder = Recorder::new("leader", &log);
    let tokens = Arc::clone(&recorder.tokens);
    let leader = tokio::spawn(replica(&store, &election, recorder).run());
    eventually("the stuck reconcile", LIMIT, || {
        count(&log, "leader stuck") == 1
    })
    .await;
    assert_eq!(*tokens.lock(), [Some(FencingToken::new(1))]);

    let deposed = Instant::now();
    election.depose();
    let error = within("run to fail", LIMIT, leader)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&error, ManagerError::LostLeadership { election } if election == "widgets-lock")
    );
    assert_eq!(
        count(&log, "leader dropped stuck"),
        1,
        "the in-flight reconcile was cancelled"
    );
    assert_eq!(
        deposed.elapsed(),
        Duration::ZERO,
        "at once, without the controller's grace"
    );
    assert_eq!(
        count(&log, "leader stuck"),
        1,
        "no reconcile started after the loss"
    );
}

#[tokio::test(start_paused = true)]
async fn a_controller_grace_longer_than_the_managers_is_capped_so_shutdown_stays_clean() {
    let store = widgets(&["stuck"]);
    let log = Log::default();
    let mut manager = manager()
        .graceful_shutdown_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let (shutdown, run) = run_until_stuck(manager, &informer, &log, Duration::from_secs(60)).await;
    let stopping = Instant::now();
    shutdown.cancel();
    within("run to return", LIMIT, run)
        .await
        .unwrap()
        .expect("a clean shutdown, not a timeout");
    assert_eq!(stopping.elapsed(), Duration::from_secs(8), "80 % of 10 s");
    assert_eq!(count(&log, "reconcile dropped stuck"), 1);
}

/// An elector that leads at once, loses when told, and counts resignations.
#[derive(Default)]
struct Counts {
    lose: tokio::sync::Notify,
    resigned: std::sync::atomic::AtomicUsize,
}

struct CountingElector(Arc<Counts>);

#[async_trait::async_trait]
impl tend::election::LeaderElector for CountingElector {
    fn name(&self) -> &str {
        "counting"
    }

    async fn campaign(&self) -> Result<FencingToken, tend::election::ElectionError> {
        Ok(FencingToken::new(7))
    }

    async fn lost(&self) {
        self.0.lose.notified().await;
    }

    async fn resign(&self) -> Result<(), tend::election::ElectionError> {
        self.0
            .resigned
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn after_losing_the_leadership_the_manager_still_withdraws_its_candidacy() {
    let store = widgets(&["a"]);
    let log = Log::default();
    let elector = Arc::new(Counts::default());
    let mut manager = manager()
        .leader_election(CountingElector(Arc::clone(&elector)))
        .build()
        .unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Recorder::new("leader", &log))
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let run = tokio::spawn(manager.run());
    eventually("the leader to reconcile", LIMIT, || {
        count(&log, "leader a") == 1
    })
    .await;
    elector.lose.notify_one();
    let error = within("run to fail", LIMIT, run)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::LostLeadership { .. }),
        "{error}"
    );
    assert_eq!(
        elector.resigned.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a lease that still renews would keep every other replica out"
    );
}
