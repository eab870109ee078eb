//! Metrics of a scripted run.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_scripted_run_with_controller_runtime_names() {
    let Served {
        address,
        shutdown,
        run,
    } = start_scripted_run().await;
    let metrics = scrape_until_four_successes(address).await;
    assert_reconcile_totals(&metrics);
    assert_controller_metrics(&metrics);
    assert_reconcile_time_buckets(&metrics);
    assert_workqueue_metrics(&metrics);
    assert_informer_election_and_user_metrics(&metrics);

    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

/// Starts the manager: leader election, a user counter at 7, two workers.
async fn start_scripted_run() -> Served {
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
    Served {
        address,
        shutdown,
        run,
    }
}

/// Scrapes until the four successful reconciles are counted.
async fn scrape_until_four_successes(address: std::net::SocketAddr) -> Exposition {
    let total = "controller_runtime_reconcile_total";
    let mut metrics = Exposition::default();
    for _ in 0..200 {
        metrics = scrape(address).await;
        if metrics.value(total, &[("controller", "widgets"), ("result", "success")]) == Some(4.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    metrics
}

/// `controller_runtime_reconcile_total` by result.
fn assert_reconcile_totals(metrics: &Exposition) {
    let total = "controller_runtime_reconcile_total";
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
}

/// The controller's error, panic, timeout, fencing and worker metrics.
fn assert_controller_metrics(metrics: &Exposition) {
    let c = [("controller", "widgets")];
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
    let tables: Vec<String> = metrics
        .label_sets("tend_controller_table_keys")
        .into_iter()
        .filter(|labels| labels.get("controller").map(String::as_str) == Some("widgets"))
        .filter_map(|labels| labels.get("table").cloned())
        .collect();
    assert_eq!(tables.len(), 8, "one series per per-key table: {tables:?}");
    for table in ["rate_limited", "last_states", "tracked_reads"] {
        let labels = [("controller", "widgets"), ("table", table)];
        assert_eq!(
            metrics.value("tend_controller_table_keys", &labels),
            Some(0.0),
            "{table}: the failures were retried or ended"
        );
    }
}

/// The reconcile time histogram: its count and controller-runtime's buckets.
fn assert_reconcile_time_buckets(metrics: &Exposition) {
    let c = [("controller", "widgets")];
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
}

/// The work queue's metrics.
fn assert_workqueue_metrics(metrics: &Exposition) {
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
}

/// The informer's, the election's and the user's own metrics.
fn assert_informer_election_and_user_metrics(metrics: &Exposition) {
    let i = [("name", "widgets")];
    assert_eq!(metrics.value("tend_informer_lists_total", &i), Some(1.0));
    assert_eq!(metrics.value("tend_informer_relists_total", &i), Some(0.0));
    assert_eq!(metrics.value("tend_informer_cache_size", &i), Some(5.0));
    // The first probe of the store's head answers at once; the cache is current.
    assert_eq!(metrics.value("tend_informer_lag_revisions", &i), Some(0.0));
    assert_eq!(metrics.value("tend_informer_lag_seconds", &i), Some(0.0));
    assert_eq!(
        metrics
            .types
            .get("tend_informer_lag_seconds")
            .map(String::as_str),
        Some("gauge")
    );
    assert_eq!(
        metrics.value("leader_election_master_status", &[("name", "metrics-lock")]),
        Some(1.0)
    );
    assert_eq!(metrics.value("my_operator_things_total", &[]), Some(7.0));
}
