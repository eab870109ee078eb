//! The manager: shared informers, start and stop order, signals, cache sync
//! failures and leader-election gating.

#[path = "support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::client::FencingToken;
use tend::controller::{Action, Context, Reconciler};
use tend::manager::{Manager, ManagerError, ManagerSetting, UnsyncedCaches};
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;
use tend::{Informer, InformerError, SettingError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use widgets::{Widget, eventually, widgets, within};

const LIMIT: Duration = Duration::from_secs(60);

type Log = Arc<Mutex<Vec<String>>>;

/// Records `"{tag} {key}"` (and the fencing token) for every reconcile; keys
/// named `stuck` never finish, and record `"{tag} dropped {key}"` when their
/// reconcile is dropped.
#[derive(Clone)]
struct Recorder {
    tag: &'static str,
    log: Log,
    tokens: Arc<Mutex<Vec<Option<FencingToken>>>>,
}

impl Recorder {
    fn new(tag: &'static str, log: &Log) -> Self {
        Self {
            tag,
            log: Arc::clone(log),
            tokens: Arc::default(),
        }
    }
}

struct OnDrop(Log, String);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.lock().push(std::mem::take(&mut self.1));
    }
}

impl Reconciler<Widget> for Recorder {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        self.log.lock().push(format!("{} {}", self.tag, ctx.key()));
        self.tokens.lock().push(ctx.fencing_token());
        if ctx.key() == "stuck" {
            let _guard = OnDrop(
                Arc::clone(&self.log),
                format!("{} dropped {}", self.tag, ctx.key()),
            );
            std::future::pending::<()>().await;
        }
        Ok(Action::Done)
    }
}

fn count(log: &Log, entry: &str) -> usize {
    log.lock().iter().filter(|e| *e == entry).count()
}

/// Adds a `widgets` controller logging to `log` with shutdown grace
/// `grace`, runs the manager, and waits (bounded) until the reconcile of
/// `stuck` started; returns the shutdown token and the run.
async fn run_until_stuck(
    mut manager: Manager,
    informer: &Informer<Widget>,
    log: &Log,
    grace: Duration,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), ManagerError>>,
) {
    let controller = manager
        .controller("widgets", informer, Recorder::new("reconcile", log))
        .shutdown_grace(grace)
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the reconcile", LIMIT, || {
        count(log, "reconcile stuck") == 1
    })
    .await;
    (shutdown, run)
}

/// Cancels `token` and waits (bounded) until `run` returned cleanly.
async fn stop(
    what: &str,
    token: &CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
) {
    token.cancel();
    within(what, LIMIT, run).await.unwrap().unwrap();
}

fn manager() -> tend::manager::ManagerBuilder {
    Manager::builder().without_signals()
}

#[tokio::test(start_paused = true)]
async fn two_controllers_share_one_informer_and_both_reconcile() {
    let store = widgets(&["a", "b", "c"]);
    let log = Log::default();
    let mut manager = manager().build().unwrap();
    let first = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let second = manager
        .informer("widgets", || -> Result<Informer<Widget>, _> {
            panic!("a registered informer is never built twice")
        })
        .unwrap();
    let one = manager
        .controller("one", &first, Recorder::new("one", &log))
        .build()
        .unwrap();
    let two = manager
        .controller("two", &second, Recorder::new("two", &log))
        .build()
        .unwrap();
    manager.add_controller(one).unwrap();
    manager.add_controller(two).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    eventually("both controllers to reconcile every widget", LIMIT, || {
        ["one", "two"].iter().all(|tag| {
            ["a", "b", "c"]
                .iter()
                .all(|k| count(&log, &format!("{tag} {k}")) == 1)
        })
    })
    .await;
    let stats = store.stats();
    assert_eq!(
        (stats.lists, stats.watches),
        (1, 1),
        "one list and one watch for both controllers"
    );

    stop("run to return", &shutdown, run).await;
}

#[test]
fn zero_timeouts_and_stall_bounds_are_refused_and_huge_ones_accepted() {
    let refused = |builder: tend::manager::ManagerBuilder| match builder.build() {
        Err(ManagerError::InvalidConfig { setting, error }) => {
            assert_eq!(error, SettingError::Zero);
            setting
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    assert_eq!(
        refused(manager().graceful_shutdown_timeout(Duration::ZERO)),
        ManagerSetting::GracefulShutdownTimeout
    );
    assert_eq!(
        refused(manager().sync_timeout(Duration::ZERO)),
        ManagerSetting::SyncTimeout
    );
    assert_eq!(
        refused(manager().stuck_key_after(Duration::ZERO)),
        ManagerSetting::StuckKeyAfter
    );
    let error = manager()
        .stalled_informer_after(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "manager is misconfigured: `stalled_informer_after` is zero"
    );
    manager()
        .stuck_key_after(Duration::MAX)
        .stuck_key_after_timeouts(std::num::NonZeroU32::MAX)
        .stalled_informer_after(Duration::MAX)
        .build()
        .expect("huge bounds mean never");
    manager()
        .without_stall_checks()
        .build()
        .expect("checks off");
}

#[tokio::test(start_paused = true)]
async fn duration_max_timeouts_mean_no_limit() {
    let store = widgets(&["a"]);
    let log = Log::default();
    let mut manager = manager()
        .graceful_shutdown_timeout(Duration::MAX)
        .sync_timeout(Duration::MAX)
        .build()
        .unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Recorder::new("r", &log))
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the widget reconciled", LIMIT, || count(&log, "r a") == 1).await;
    stop("run to return", &shutdown, run).await;
}

#[tokio::test]
async fn registration_rejects_duplicates_and_type_mismatches() {
    let store = widgets(&[]);
    let mut manager = manager().build().unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let log = Log::default();
    let a = manager
        .controller("same", &informer, Recorder::new("a", &log))
        .build()
        .unwrap();
    let b = manager
        .controller("same", &informer, Recorder::new("b", &log))
        .build()
        .unwrap();
    manager.add_controller(a).unwrap();
    let error = manager.add_controller(b).unwrap_err();
    assert!(
        matches!(&error, ManagerError::DuplicateController { controller } if controller == "same")
    );
    assert_eq!(
        error.to_string(),
        "a controller named `same` is already registered"
    );

    #[derive(Debug, Clone)]
    struct Other(tend::Revision);
    impl tend::Object for Other {
        type Key = u32;
        fn key(&self) -> u32 {
            0
        }
        fn version(&self) -> tend::Revision {
            self.0
        }
        fn set_version(&mut self, v: tend::Revision) {
            self.0 = v;
        }
    }
    let other = MemoryStore::<Other>::new("others");
    let error = manager
        .informer("widgets", || Informer::builder(other.clone()).build())
        .unwrap_err();
    assert!(matches!(error, ManagerError::InformerType { informer } if informer == "widgets"));

    manager.add_task("t", |_| async { Ok(()) }).unwrap();
    let error = manager.add_task("t", |_| async { Ok(()) }).unwrap_err();
    assert!(matches!(error, ManagerError::DuplicateTask { .. }));
}

#[tokio::test(start_paused = true)]
async fn starts_tasks_then_informers_then_controllers_and_stops_in_reverse() {
    let store = widgets(&["stuck"]);
    let log = Log::default();
    let mut manager = manager().build().unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let task_log = Arc::clone(&log);
    let task_store = store.clone();
    manager
        .add_task("sidecar", move |cancel: CancellationToken| async move {
            task_log
                .lock()
                .push(format!("task started, lists {}", task_store.stats().lists));
            cancel.cancelled().await;
            task_log.lock().push("task stopped".to_owned());
            Ok(())
        })
        .unwrap();
    let (shutdown, run) = run_until_stuck(manager, &informer, &log, Duration::from_secs(1)).await;
    assert!(
        informer.is_synced(),
        "controllers start after the caches synced"
    );
    let stopping = Instant::now();
    stop("run to return", &shutdown, run).await;
    assert_eq!(
        *log.lock(),
        [
            "task started, lists 0",
            "reconcile stuck",
            "reconcile dropped stuck",
            "task stopped"
        ],
        "tasks start before informers list; controllers stop before tasks"
    );
    assert_eq!(
        stopping.elapsed(),
        Duration::from_secs(1),
        "the controller's grace, then cancelled"
    );
}

/// A task that ignores its cancellation token.
fn stubborn(manager: &mut Manager) {
    manager
        .add_task("stubborn", |_cancel| async {
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        })
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_is_bounded_by_the_graceful_shutdown_timeout() {
    let mut manager = manager()
        .graceful_shutdown_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    stubborn(&mut manager);
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stopping = Instant::now();
    shutdown.cancel();
    let error = within("run to return", LIMIT, run)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, ManagerError::ShutdownTimeout { timeout } if timeout == Duration::from_secs(5))
    );
    assert_eq!(stopping.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_second_signal_forces_the_shutdown() {
    let (signal, signals) = futures::channel::mpsc::unbounded::<()>();
    let mut manager = Manager::builder()
        .signals(signals)
        .graceful_shutdown_timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    stubborn(&mut manager);
    let run = tokio::spawn(manager.run());
    tokio::time::sleep(Duration::from_secs(1)).await;

    signal.unbounded_send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !run.is_finished(),
        "the first signal waits for the stubborn task"
    );
    let forcing = Instant::now();
    signal.unbounded_send(()).unwrap();
    let error = within("run to return", LIMIT, run)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(error, ManagerError::ForcedShutdown), "{error:?}");
    assert_eq!(forcing.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_cache_that_never_syncs_fails_run_naming_the_informer() {
    let store = widgets(&["a"]);
    store.fail_next_lists(u32::MAX);
    let log = Log::default();
    let mut manager = manager()
        .sync_timeout(Duration::from_secs(30))
        .unsynced_caches(UnsyncedCaches::Fail)
        .build()
        .unwrap();
    let informer = manager
        .informer("widget-cache", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Recorder::new("r", &log))
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();

    let started = Instant::now();
    let error = within("run to fail", LIMIT, manager.run())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ManagerError::Informer { informer, source: InformerError::SyncTimeout { .. } } if informer == "widget-cache")
    );
    assert_eq!(error.to_string(), "informer `widget-cache` failed");
    let source = std::error::Error::source(&error).unwrap().to_string();
    assert!(
        source.contains("`widgets`"),
        "the source names the source: {source}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert!(log.lock().is_empty(), "nothing reconciled");
}

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
