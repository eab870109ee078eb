//! Probes and /debug/queues over HTTP.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_debug_queues_reflect_state_over_http() {
    let store = widgets(&["stuck", "ok"]);
    store.fail_next_lists(u32::MAX);
    let Served {
        address,
        shutdown,
        run,
    } = start_unsynced(&store).await;
    assert_probes_until_ready(address, &store).await;
    assert_the_stuck_key_is_in_flight_and_ageing(address).await;

    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
    eventually("the server to close", LIMIT, || {
        std::net::TcpStream::connect(address).is_err()
    })
    .await;
}

/// A manager whose informer over `store` retries its lists quickly.
async fn start_unsynced(store: &tend::memory::MemoryStore<Widget>) -> Served {
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
    Served {
        address,
        shutdown,
        run,
    }
}

/// Healthy but not ready while lists fail; ready once they succeed.
async fn assert_probes_until_ready(
    address: std::net::SocketAddr,
    store: &tend::memory::MemoryStore<Widget>,
) {
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
}

/// `/debug/queues`, checked to be JSON, parsed.
async fn debug_queues(address: std::net::SocketAddr) -> serde_json::Value {
    let response = get(address, "/debug/queues").await;
    assert_eq!(
        (response.status, response.content_type.as_str()),
        (200, "application/json")
    );
    serde_json::from_str::<serde_json::Value>(&response.body).unwrap()
}

/// `stuck` shows in flight in `/debug/queues`, its age and the longest
/// running processor metric growing.
async fn assert_the_stuck_key_is_in_flight_and_ageing(address: std::net::SocketAddr) {
    let mut report = serde_json::Value::Null;
    for _ in 0..200 {
        report = debug_queues(address).await;
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
    let later = debug_queues(address).await;
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
}
