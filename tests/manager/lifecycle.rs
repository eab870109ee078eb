//! Start and stop order, bounded shutdown, signals and unsynced caches.

use super::*;

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
