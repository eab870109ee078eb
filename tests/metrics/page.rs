//! The status page: its files, and `/status.json` against what the manager
//! does (keys in flight, stuck keys, the last reconciles and errors).

use super::*;

/// A key that is markup: the page must show it as text.
const MARKUP_KEY: &str =
    "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_are_served_with_a_policy_that_allows_only_them() {
    let store = widgets(&[]);
    let (address, _queue, shutdown, run) =
        serve(&store, Manager::builder(), Duration::from_secs(1), &[]).await;
    for (path, content_type) in [
        ("/", "text/html; charset=utf-8"),
        ("/status", "text/html; charset=utf-8"),
        ("/status.js", "text/javascript; charset=utf-8"),
        ("/status.css", "text/css; charset=utf-8"),
    ] {
        let response = get(address, path).await;
        assert_eq!(
            (response.status, response.content_type.as_str()),
            (200, content_type),
            "{path}"
        );
        let policy = response
            .header("content-security-policy")
            .unwrap_or_default();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("script-src 'self'"),
            "{path}: {policy}"
        );
        assert_eq!(
            response.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    let page = get(address, "/status").await.body;
    assert!(
        page.contains("<script src=\"status.js\" defer></script>"),
        "{page}"
    );
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing loaded from elsewhere: {page}"
    );
    let data = get(address, "/status.json").await;
    assert_eq!(data.content_type, "application/json");
    assert_eq!(data.header("cache-control"), Some("no-store"));
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_shows_keys_in_flight_stuck_keys_reconciles_and_errors() {
    let store = widgets(&["ok", "terminal", MARKUP_KEY]);
    let builder =
        Manager::builder().stuck_key_after_timeouts(std::num::NonZeroU32::new(2).unwrap());
    let (address, queue, shutdown, run) =
        serve(&store, builder, Duration::from_millis(100), &["held"]).await;

    let response = get_until(address, "/status.json", |r| {
        let report = json(r);
        let controller = &report["controllers"][0];
        controller["errors"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
            && controller["keys_in_flight"][0]["stuck"] == true
            && controller["reconciles"].as_u64() >= Some(3)
    })
    .await;
    let report = json(&response);
    shows_the_controller(&report["controllers"][0]);
    let informer = &report["informers"][0];
    assert_eq!(
        (informer["name"].as_str(), informer["synced"].as_bool()),
        (Some("widgets"), Some(true))
    );
    assert_eq!(informer["objects"], 3);
    assert!(informer["failing_for_seconds"].is_null());
    assert_eq!(
        (
            informer["lag_revisions"].as_u64(),
            informer["behind_for_seconds"].as_f64()
        ),
        (Some(0), Some(0.0))
    );
    assert_eq!(
        (
            report["health"]["ok"].as_bool(),
            report["ready"]["ok"].as_bool()
        ),
        (Some(false), Some(true))
    );
    assert!(report["election"].is_null() && report["shards"].is_null());
    let tables = &report["controllers"][0]["tables"];
    assert_eq!(tables.as_array().map(Vec::len), Some(8), "{tables}");
    assert_eq!(tables[0][0], "queued");
    assert!(tables[0][1].as_u64() >= Some(1), "the held key: {tables}");

    queue.done(&"held".to_owned()).unwrap();
    let after = get_until(address, "/status.json", |r| {
        let report = json(r);
        report["health"]["ok"] == true
            && report["controllers"][0]["tables"][0] == serde_json::json!(["queued", 0])
    })
    .await;
    assert_eq!(
        json(&after)["controllers"][0]["keys_in_flight"],
        serde_json::json!([])
    );
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_shows_the_election() {
    let store = widgets(&[]);
    let election = MemoryElectionGroup::new("widgets-election");
    let builder = Manager::builder().leader_election(election.candidate());
    let (address, _queue, shutdown, run) =
        serve(&store, builder, Duration::from_secs(1), &[]).await;
    let response = get_until(address, "/status.json", |r| {
        json(r)["election"]["leader"] == true
    })
    .await;
    let report = json(&response);
    assert_eq!(report["election"]["name"], "widgets-election");
    assert_eq!(report["election"]["token"], 1);
    assert!(report["election"]["for_seconds"].as_f64() >= Some(0.0));
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}

/// The `widgets` controller: `held` in flight and stuck, `terminal` failed,
/// the others reconciled.
fn shows_the_controller(controller: &serde_json::Value) {
    assert_eq!(controller["name"], "widgets");
    assert_eq!(controller["placement"], "everywhere");
    assert_eq!(controller["active"], true);
    assert_eq!(controller["in_flight"], 1);
    assert_eq!(controller["keys_in_flight"][0]["key"], "held");
    assert!(controller["keys_in_flight"][0]["age_seconds"].as_f64() > Some(0.2));
    assert_eq!(controller["stuck_after_seconds"].as_f64(), Some(0.2));
    let error = &controller["errors"][0];
    assert_eq!(error["key"], "terminal");
    assert_eq!(error["outcome"], "terminal error");
    assert_eq!(error["error"], "invalid spec");
    assert_eq!(error["triggers"], "initial");
    let recent: Vec<_> = controller["recent"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    for expected in [
        ("ok", "success"),
        ("terminal", "terminal error"),
        (MARKUP_KEY, "success"),
    ] {
        assert!(recent.contains(&expected), "{expected:?} in {recent:?}");
    }
    assert_eq!(
        (
            controller["failures"].as_u64(),
            controller["retries"].as_u64()
        ),
        (Some(1), Some(0))
    );
}

fn json(response: &http::Response) -> serde_json::Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("invalid JSON ({error}): {}", response.body))
}

/// Writes its widget back on every run: a key that never calms down.
struct Rewriter;

impl Reconciler<Widget> for Rewriter {
    type Error = tend::client::ClientError;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Self::Error> {
        if let (Some(widget), Some(client)) = (ctx.object(), ctx.client::<Widget>()) {
            client.update((**widget).clone()).await?;
        }
        Ok(Action::Done)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_flags_a_hot_key() {
    let store = widgets(&["spinning"]);
    let mut manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().unwrap())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let policy = tend::controller::HotKeyPolicy::default().spaced_up_to(Duration::from_secs(1));
    let controller = manager
        .controller("rewriter", &informer, Rewriter)
        .client(store.client())
        .hot_keys(policy)
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    let response = get_until(address, "/status.json", |r| {
        json(r)["controllers"][0]["hot_keys"]
            .as_array()
            .is_some_and(|hot| !hot.is_empty())
    })
    .await;
    let hot = &json(&response)["controllers"][0]["hot_keys"][0];
    assert_eq!(hot["key"], "spinning");
    assert!(hot["writes"].as_f64() > Some(30.0), "{hot}");
    assert!(
        hot["woken_by"]
            .as_str()
            .is_some_and(|w| w.starts_with("changed ×")),
        "{hot}"
    );
    assert!(hot["spacing_seconds"].as_f64() <= Some(1.0), "{hot}");
    let metrics = scrape(address).await;
    assert_eq!(
        metrics.value(
            "tend_controller_hot_key_episodes_total",
            &[("controller", "rewriter")]
        ),
        Some(1.0)
    );
    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}
