//! Controllers added to and removed from a running manager.

#[path = "support/http.rs"]
mod http;
#[path = "support/widgets.rs"]
mod widgets;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tend::controller::{Action, Context, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::memory::MemoryStore;
use tend::{Informer, Revision};

use widgets::{Widget, eventually, within};

const LIMIT: Duration = Duration::from_secs(30);
const KEYS: usize = 20;
const CYCLES: usize = 100;

/// The last version of each key the stable controller reconciled.
#[derive(Clone, Default)]
struct Latest(Arc<Mutex<HashMap<String, Revision>>>);

impl Reconciler<Widget> for Latest {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        if let Some(widget) = ctx.object() {
            self.0.lock().insert(ctx.key().clone(), widget.version);
        }
        Ok(Action::Done)
    }
}

/// A controller added for one cycle: counts its reconciles, and those
/// that started after its removal returned.
#[derive(Clone)]
struct Cycle {
    reconciles: Arc<AtomicUsize>,
    removed: Arc<AtomicBool>,
    late: Arc<AtomicUsize>,
}

impl Reconciler<Widget> for Cycle {
    type Error = Infallible;

    async fn reconcile(&self, _: Context<Widget>) -> Result<Action, Infallible> {
        if self.removed.load(Ordering::SeqCst) {
            self.late.fetch_add(1, Ordering::SeqCst);
        }
        self.reconciles.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(Action::Done)
    }
}

fn store() -> MemoryStore<Widget> {
    let names: Vec<String> = (0..KEYS).map(|i| format!("w{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    widgets::widgets(&refs)
}

/// Rewrites every key until `stop`, one write per millisecond.
async fn traffic(store: MemoryStore<Widget>, stop: Arc<AtomicBool>) {
    let client = store.client();
    let mut i = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let key = format!("w{:02}", i % KEYS);
        if let Some(current) = store.get(&key) {
            let _ = client.update(Widget::clone(&current)).await;
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The `/metrics` lines naming `needle`.
async fn series(address: std::net::SocketAddr, needle: &str) -> Vec<String> {
    let metrics = http::get(address, "/metrics").await;
    metrics
        .body
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains(needle))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_add_and_remove_cycles_under_traffic_lose_nothing_and_leave_nothing_behind() {
    let store = store();
    let Stable {
        address,
        latest,
        handle,
        shutdown,
        run,
    } = start_with_a_stable_controller(&store).await;
    let tasks = tokio::runtime::Handle::current().metrics();
    let baseline = tasks.num_alive_tasks();
    let writing = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(traffic(store.clone(), Arc::clone(&writing)));

    let late = Arc::new(AtomicUsize::new(0));
    for cycle in 0..CYCLES {
        add_reconcile_and_remove(&handle, &store, cycle, &late).await;
    }
    writing.store(true, Ordering::SeqCst);
    within("the writer", LIMIT, writer)
        .await
        .expect("not panicked");

    assert_the_stable_controller_caught_up(&store, &latest).await;
    assert_eq!(late.load(Ordering::SeqCst), 0, "reconciles after removal");
    eventually("the removed controllers' tasks to end", LIMIT, || {
        tasks.num_alive_tasks() <= baseline
    })
    .await;
    assert_only_the_stable_controller_is_left(address).await;

    let unknown = handle.remove_controller("cycle-0").await;
    assert!(matches!(
        unknown,
        Err(ManagerError::UnknownController { .. })
    ));
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
    let stopped = handle.remove_controller("stable").await;
    assert!(
        matches!(stopped, Err(ManagerError::NotRunning)),
        "{stopped:?}"
    );
}

/// A running manager with the `stable` controller, which has reconciled
/// every key.
struct Stable {
    address: std::net::SocketAddr,
    latest: Latest,
    handle: tend::manager::ManagerHandle,
    shutdown: tokio_util::sync::CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

async fn start_with_a_stable_controller(store: &MemoryStore<Widget>) -> Stable {
    let mut manager = Manager::builder()
        .without_signals()
        .http_address("127.0.0.1:0".parse().expect("an address"))
        .build()
        .expect("valid");
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let latest = Latest::default();
    let stable = manager
        .controller("stable", &informer, latest.clone())
        .build()
        .expect("valid");
    manager.add_controller(stable).expect("registered");
    let handle = manager.handle();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the stable controller to reconcile", LIMIT, || {
        latest.0.lock().len() == KEYS
    })
    .await;
    Stable {
        address,
        latest,
        handle,
        shutdown,
        run,
    }
}

/// One cycle: a controller `cycle-N` on its own informer, added at run time,
/// reconciling every key, then removed.
async fn add_reconcile_and_remove(
    handle: &tend::manager::ManagerHandle,
    store: &MemoryStore<Widget>,
    cycle: usize,
    late: &Arc<AtomicUsize>,
) {
    let name = format!("cycle-{cycle}");
    // Its own informer, created at run time, on the same store.
    let own = handle
        .informer(&format!("{name}-cache"), || {
            Informer::builder(store.clone()).build()
        })
        .expect("registered");
    let reconciler = Cycle {
        reconciles: Arc::default(),
        removed: Arc::default(),
        late: Arc::clone(late),
    };
    let controller = handle
        .controller(&name, &own, reconciler.clone())
        .build()
        .expect("valid");
    within("the add", LIMIT, handle.add_controller(controller))
        .await
        .expect("added");
    eventually("the added controller to reconcile", LIMIT, || {
        reconciler.reconciles.load(Ordering::SeqCst) >= KEYS
    })
    .await;
    within("the removal", LIMIT, handle.remove_controller(&name))
        .await
        .expect("removed");
    reconciler.removed.store(true, Ordering::SeqCst);
}

/// Every key's last write was reconciled by the controller that stayed.
async fn assert_the_stable_controller_caught_up(store: &MemoryStore<Widget>, latest: &Latest) {
    eventually("the stable controller to catch up", LIMIT, || {
        let seen = latest.0.lock();
        (0..KEYS).all(|i| {
            let key = format!("w{i:02}");
            store.get(&key).map(|w| w.version) == seen.get(&key).copied()
        })
    })
    .await;
}

/// No metric series or runnable of a removed controller is left; the stable
/// one's are there.
async fn assert_only_the_stable_controller_is_left(address: std::net::SocketAddr) {
    let left = series(address, "cycle-").await;
    assert!(left.is_empty(), "metric series left behind: {left:?}");
    assert!(
        !series(address, "stable").await.is_empty(),
        "the stable controller's series are there"
    );
    let runnables = http::get(address, "/debug/runnables").await;
    assert!(!runnables.body.contains("cycle-"), "{}", runnables.body);
    let runnables: serde_json::Value = serde_json::from_str(&runnables.body).expect("JSON");
    assert_eq!(
        runnables,
        serde_json::json!([
            {"name": "stable", "kind": "controller", "placement": "everywhere", "active": true}
        ])
    );
    assert_eq!(
        series(address, "tend_runnable_active").await,
        ["tend_runnable_active{name=\"stable\",kind=\"controller\",placement=\"everywhere\"} 1"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_name_is_refused_and_a_handle_before_run_waits_for_it() {
    let store = store();
    let mut manager = Manager::builder().without_signals().build().expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    let first = manager
        .controller("twice", &informer, Latest::default())
        .build()
        .expect("valid");
    manager.add_controller(first).expect("registered");
    let handle = manager.handle();
    let again = handle
        .controller("twice", &informer, Latest::default())
        .build()
        .expect("valid");
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    let added = within("the add", LIMIT, handle.add_controller(again)).await;
    assert!(
        matches!(&added, Err(ManagerError::DuplicateController { controller }) if controller == "twice"),
        "{added:?}"
    );
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
}

#[tokio::test(start_paused = true)]
async fn an_add_waiting_for_its_caches_ends_with_the_manager_and_one_over_an_unknown_informer_is_refused()
 {
    let store = store();
    let broken = MemoryStore::<Widget>::new("broken");
    broken.fail_next_lists(u32::MAX);
    let manager = Manager::builder()
        .without_signals()
        .sync_timeout(Duration::from_secs(3600))
        .graceful_shutdown_timeout(Duration::from_secs(5))
        .build()
        .expect("valid");
    let handle = manager.handle();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    let stranger = Informer::builder(store.clone()).build().expect("valid");
    let unknown = handle
        .controller("unknown", &stranger, Latest::default())
        .build()
        .expect("valid");
    let refused = within("the add", LIMIT, handle.add_controller(unknown)).await;
    assert!(
        matches!(&refused, Err(ManagerError::UnregisteredInformer { controller }) if controller == "unknown"),
        "{refused:?}"
    );

    let informer = handle
        .informer("broken", || Informer::builder(broken.clone()).build())
        .expect("registered");
    let waiting = handle
        .controller("waiting", &informer, Latest::default())
        .build()
        .expect("valid");
    let adding = tokio::spawn({
        let handle = handle.clone();
        async move { handle.add_controller(waiting).await }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!adding.is_finished(), "its cache has not synced");
    let stopping = tokio::time::Instant::now();
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("a clean stop, not a shutdown timeout");
    assert!(stopping.elapsed() < Duration::from_secs(5));
    let added = within("the add", LIMIT, adding)
        .await
        .expect("not panicked");
    assert!(matches!(added, Err(ManagerError::NotRunning)), "{added:?}");
}
