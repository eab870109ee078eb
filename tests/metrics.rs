//! The manager's metrics and endpoints, scraped over real loopback HTTP.

#[path = "support/http.rs"]
mod http;
#[path = "support/widgets.rs"]
mod widgets;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::Informer;
use tend::controller::{Action, Context, ErrorPolicy, Reconciler};
use tend::manager::Manager;
use tend::manager::prometheus_client::metrics::counter::Counter;
use tend::memory::MemoryElectionGroup;

use http::{Exposition, get};
use widgets::{Widget, eventually, widgets, within};

const LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
enum ScriptError {
    #[error("transient failure")]
    Transient,
    #[error("invalid spec")]
    Invalid,
}

/// Acts by key: `ok` succeeds; `err` fails once; `panic` panics once;
/// `requeue` asks for a requeue once; `terminal` fails terminally; `stuck`
/// never finishes.
#[derive(Default, Clone)]
struct Script {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Reconciler<Widget> for Script {
    type Error = ScriptError;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, ScriptError> {
        self.calls.lock().push(ctx.key().clone());
        let first = ctx.attempt() == 1;
        match ctx.key().as_str() {
            "err" if first => Err(ScriptError::Transient),
            "panic" if first => panic!("scripted panic"),
            "requeue" if self.calls.lock().iter().filter(|k| *k == "requeue").count() == 1 => {
                Ok(Action::RequeueAfter(Duration::from_millis(20)))
            }
            "terminal" => Err(ScriptError::Invalid),
            "stuck" => std::future::pending().await,
            _ => Ok(Action::Done),
        }
    }

    fn error_policy(&self, error: &ScriptError) -> ErrorPolicy {
        match error {
            ScriptError::Transient => ErrorPolicy::Retry,
            ScriptError::Invalid => ErrorPolicy::Terminal,
        }
    }
}

async fn scrape(address: std::net::SocketAddr) -> Exposition {
    let response = get(address, "/metrics").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Exposition::parse(&response.body)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_scripted_run_with_controller_runtime_names() {
    let store = widgets(&["ok", "err", "panic", "requeue", "terminal"]);
    let election = MemoryElectionGroup::new("metrics-lock");
    let mut manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().unwrap())
        .leader_election(election.candidate())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let mine = Counter::<u64>::default();
    manager.registry_mut().register(
        "my_operator_things",
        "Things counted by the user",
        mine.clone(),
    );
    mine.inc_by(7);
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Script::default())
        .concurrency(NonZeroUsize::new(2).unwrap())
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    let total = "controller_runtime_reconcile_total";
    let mut metrics = Exposition::default();
    for _ in 0..200 {
        metrics = scrape(address).await;
        if metrics.value(total, &[("controller", "widgets"), ("result", "success")]) == Some(4.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = [("controller", "widgets")];
    let result = |r| metrics.value(total, &[("controller", "widgets"), ("result", r)]);
    assert_eq!(
        result("success"),
        Some(4.0),
        "ok, and err, panic, requeue on retry"
    );
    assert_eq!(result("error"), Some(3.0), "err, panic, terminal");
    assert_eq!(result("requeue_after"), Some(1.0));
    assert_eq!(result("requeue"), Some(0.0));
    let mut sets = metrics.label_sets(total);
    sets.sort();
    assert_eq!(
        sets,
        ["error", "requeue", "requeue_after", "success"]
            .map(|r| labels(&[("controller", "widgets"), ("result", r)]))
    );
    assert_eq!(
        metrics.types.get(total).map(String::as_str),
        Some("counter")
    );
    assert_eq!(
        metrics.value("controller_runtime_reconcile_errors_total", &c),
        Some(3.0)
    );
    assert_eq!(
        metrics.value("controller_runtime_terminal_reconcile_errors_total", &c),
        Some(1.0)
    );
    assert_eq!(
        metrics.value("controller_runtime_reconcile_panics_total", &c),
        Some(1.0)
    );
    assert_eq!(
        metrics.value("controller_runtime_reconcile_timeouts_total", &c),
        Some(0.0)
    );
    assert_eq!(
        metrics.value("tend_controller_fenced_writes_refused_total", &c),
        Some(0.0),
        "exported from the start"
    );
    assert_eq!(
        metrics.value("controller_runtime_max_concurrent_reconciles", &c),
        Some(2.0)
    );
    assert_eq!(
        metrics.value("controller_runtime_active_workers", &c),
        Some(0.0)
    );
    let time = "controller_runtime_reconcile_time_seconds";
    assert_eq!(metrics.value(&format!("{time}_count"), &c), Some(8.0));
    let buckets = metrics.label_sets(&format!("{time}_bucket"));
    assert_eq!(
        buckets.len(),
        41,
        "controller-runtime's 40 buckets and +Inf"
    );
    let bounds: Vec<f64> = buckets
        .iter()
        .map(|l| match l["le"].as_str() {
            "+Inf" => f64::INFINITY,
            le => le.parse().unwrap(),
        })
        .collect();
    let mut expected = vec![
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ];
    expected.push(f64::INFINITY);
    assert_eq!(bounds, expected);

    let q = [("controller", "widgets"), ("name", "widgets")];
    assert_eq!(
        metrics.value("workqueue_retries_total", &q),
        Some(2.0),
        "err and panic"
    );
    assert_eq!(
        metrics.value("tend_workqueue_rate_limiter_panics_total", &q),
        Some(0.0),
        "exported from the start"
    );
    assert_eq!(
        metrics.value("workqueue_adds_total", &q),
        Some(8.0),
        "5 listed, 2 retries, 1 requeue"
    );
    assert_eq!(metrics.value("workqueue_depth", &q), Some(0.0));
    assert_eq!(
        metrics.value("workqueue_queue_duration_seconds_count", &q),
        Some(8.0)
    );
    assert_eq!(
        metrics.value("workqueue_work_duration_seconds_count", &q),
        Some(8.0)
    );
    assert_eq!(
        metrics.value("workqueue_unfinished_work_seconds", &q),
        Some(0.0)
    );
    assert_eq!(
        metrics.value("workqueue_longest_running_processor_seconds", &q),
        Some(0.0)
    );

    let i = [("name", "widgets")];
    assert_eq!(metrics.value("tend_informer_lists_total", &i), Some(1.0));
    assert_eq!(metrics.value("tend_informer_relists_total", &i), Some(0.0));
    assert_eq!(metrics.value("tend_informer_cache_size", &i), Some(5.0));
    assert_eq!(
        metrics.value("leader_election_master_status", &[("name", "metrics-lock")]),
        Some(1.0)
    );
    assert_eq!(metrics.value("my_operator_things_total", &[]), Some(7.0));

    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_debug_queues_reflect_state_over_http() {
    let store = widgets(&["stuck", "ok"]);
    store.fail_next_lists(u32::MAX);
    let mut manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().unwrap())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || {
            Informer::builder(store.clone())
                .backoff(
                    Duration::from_millis(10),
                    Duration::from_millis(20),
                    Duration::from_secs(1),
                )
                .build()
        })
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Script::default())
        .shutdown_grace(Duration::from_millis(50))
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    let health = get(address, "/healthz").await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let ready = get(address, "/readyz").await;
    assert_eq!(ready.status, 503);
    assert_eq!(
        ready.body,
        "not ready: informer `widgets` has not synced; controller `widgets` is waiting for `widgets`\n"
    );

    store.fail_next_lists(0);
    let mut became_ready = false;
    for _ in 0..200 {
        if get(address, "/readyz").await.status == 200 {
            became_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(became_ready, "ready after the cache synced");

    let queues = || async {
        let response = get(address, "/debug/queues").await;
        assert_eq!(
            (response.status, response.content_type.as_str()),
            (200, "application/json")
        );
        serde_json::from_str::<serde_json::Value>(&response.body).unwrap()
    };
    let mut report = serde_json::Value::Null;
    for _ in 0..200 {
        report = queues().await;
        if report[0]["in_flight"] == 1 && report[0]["queued"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(report[0]["controller"], "widgets");
    assert_eq!(
        (report[0]["in_flight"].clone(), report[0]["delayed"].clone()),
        (1.into(), 0.into())
    );
    assert_eq!(report[0]["oldest_in_flight"][0]["key"], "stuck");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = queues().await;
    let age = later[0]["oldest_in_flight"][0]["age_seconds"]
        .as_f64()
        .unwrap();
    assert!(age >= 0.3, "the stuck reconcile's age grows: {age}");
    let metrics = scrape(address).await;
    let q = [("controller", "widgets"), ("name", "widgets")];
    let longest = metrics
        .value("workqueue_longest_running_processor_seconds", &q)
        .unwrap();
    assert!(longest >= 0.3, "{longest}");

    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
    eventually("the server to close", LIMIT, || {
        std::net::TcpStream::connect(address).is_err()
    })
    .await;
}

/// A manager serving HTTP with one informer over `store` (quick backoff) and
/// a `widgets` controller; returns the controller's queue before the run.
async fn serve(
    store: &tend::memory::MemoryStore<Widget>,
    builder: tend::manager::ManagerBuilder,
    reconcile_timeout: Duration,
    hold: &[&str],
) -> (
    std::net::SocketAddr,
    tend::WorkQueue<String, tend::controller::Triggers>,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<Result<(), tend::manager::ManagerError>>,
) {
    let mut manager = builder
        .http_address("127.0.0.1:0".parse().unwrap())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || {
            Informer::builder(store.clone())
                .backoff(
                    Duration::from_millis(10),
                    Duration::from_millis(20),
                    Duration::from_secs(1),
                )
                .build()
        })
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Script::default())
        .reconcile_timeout(reconcile_timeout)
        .shutdown_grace(Duration::from_millis(50))
        .build()
        .unwrap();
    let queue = controller.queue();
    // Held as a wedged worker would: taken before any worker runs, never done.
    for key in hold {
        queue.add((*key).to_owned());
        within("a key", LIMIT, queue.get()).await.expect("a key");
    }
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    (address, queue, shutdown, tokio::spawn(manager.run()))
}

/// GETs `path` until `done` holds for the response (bounded).
async fn get_until(
    address: std::net::SocketAddr,
    path: &str,
    done: impl Fn(&http::Response) -> bool,
) -> http::Response {
    let mut response = get(address, path).await;
    for _ in 0..500 {
        if done(&response) {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        response = get(address, path).await;
    }
    panic!("GET {path} never answered as expected; last: {response:?}");
}

const ODD_KEYS: [&str; 5] = [
    "say \"hi\"",
    "two\nlines",
    "back\\slash",
    "ünïcødé ✓",
    "{\"json\": [1]}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_queues_is_valid_json_with_keys_as_written_and_healthz_names_stuck_keys() {
    let store = widgets(&[]);
    let builder =
        Manager::builder().stuck_key_after_timeouts(std::num::NonZeroU32::new(2).unwrap());
    let (address, queue, shutdown, run) =
        serve(&store, builder, Duration::from_millis(100), &ODD_KEYS).await;

    let response = get(address, "/debug/queues").await;
    assert_eq!(response.content_type, "application/json");
    let report: serde_json::Value = serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("invalid JSON ({error}): {}", response.body));
    let mut keys: Vec<_> = report[0]["oldest_in_flight"]
        .as_array()
        .expect("a list of keys")
        .iter()
        .map(|held| held["key"].as_str().expect("a string key").to_owned())
        .collect();
    keys.sort();
    let mut expected = ODD_KEYS.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(keys, expected);

    // Taken microseconds apart: wait until all five passed the bound.
    let health = get_until(address, "/healthz", |r| r.body.contains(": 5 keys")).await;
    assert_eq!(health.status, 503);
    let (head, named) = health
        .body
        .split_once(": `")
        .unwrap_or_else(|| panic!("{}", health.body));
    assert_eq!(
        head,
        "controller `widgets` is stuck: 5 keys held longer than 200ms (reconcile timeout 100ms)"
    );
    assert_eq!(health.body.lines().count(), 1, "{}", health.body);
    let one_line = [
        "say \"hi\"",
        "two\\nlines",
        "back\\slash",
        "ünïcødé ✓",
        "{\"json\": [1]}",
    ];
    for key in one_line {
        assert!(
            named.contains(&format!("{key}` for ")),
            "{key} in {}",
            health.body
        );
    }

    for key in ODD_KEYS {
        queue.done(&key.to_owned()).unwrap();
    }
    assert_eq!(get(address, "/healthz").await.body, "ok\n");
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_names_an_informer_whose_source_keeps_failing() {
    let store = widgets(&["ok"]);
    store.fail_next_lists(u32::MAX);
    let builder = Manager::builder()
        .sync_timeout(Duration::from_secs(600))
        .stalled_informer_after(Duration::from_millis(100));
    let (address, _queue, shutdown, run) =
        serve(&store, builder, Duration::from_secs(1), &[]).await;

    let health = get_until(address, "/healthz", |r| r.status == 503).await;
    assert!(
        health
            .body
            .starts_with("informer `widgets` is stalled: its source has been failing for ")
            && health
                .body
                .ends_with("(bound 100ms), no progress since it started\n"),
        "{}",
        health.body
    );
    store.fail_next_lists(0);
    get_until(address, "/healthz", |r| r.status == 200).await;
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}
