//! /debug/queues with odd keys, and /healthz naming what is stuck.

use super::*;

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
