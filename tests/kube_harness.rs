//! The Kubernetes control plane harness itself: it serves, it is shared
//! across test runtimes, its API server restarts, compaction expires old
//! watches, a missing binary says how to get one, and its processes never
//! outlive their owner.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`).

#![cfg(feature = "kube")]

#[path = "support/wait.rs"]
mod wait;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::Kubeconfig;
use tend::testing::HarnessError;
use tend::testing::kube::ControlPlane;

use wait::within;

const LIMIT: Duration = Duration::from_secs(20);

async fn plane(builder: tend::testing::kube::ControlPlaneBuilder) -> ControlPlane {
    within(
        "a control plane to start",
        Duration::from_secs(90),
        builder.start(),
    )
    .await
    .unwrap_or_else(|error| panic!("the control plane starts: {error}"))
}

async fn shared() -> &'static ControlPlane {
    within(
        "the shared control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .unwrap_or_else(|error| panic!("the shared control plane starts: {error}"))
}

/// A config map `name` in `namespace`, holding `value`; its resource version.
async fn create_config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    value: &str,
) -> String {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut config_map = ConfigMap::default();
    config_map.metadata.name = Some(name.to_owned());
    config_map.data = Some([("value".to_owned(), value.to_owned())].into());
    let created = within(
        "a create",
        LIMIT,
        api.create(&PostParams::default(), &config_map),
    )
    .await
    .expect("the API server stores the config map");
    created
        .metadata
        .resource_version
        .expect("a resource version")
}

async fn value_of(client: &kube::Client, namespace: &str, name: &str) -> String {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config_map = within("a get", LIMIT, api.get(name))
        .await
        .expect("the config map");
    config_map.data.expect("data")["value"].clone()
}

/// The first event of a watch of config maps in `namespace` from
/// `resource_version`.
async fn first_event(
    client: &kube::Client,
    namespace: &str,
    resource_version: &str,
) -> WatchEvent<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let params = WatchParams::default().timeout(10);
    let events = within("a watch", LIMIT, api.watch(&params, resource_version))
        .await
        .expect("the watch opens");
    let mut events = Box::pin(events);
    within("a watch event", LIMIT, events.next())
        .await
        .expect("an event")
        .expect("a well-formed event")
}

fn assert_expired(event: &WatchEvent<ConfigMap>) {
    match event {
        WatchEvent::Error(status) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (410, "Expired"),
                "{status:?}"
            );
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plane_stores_config_maps_through_its_client_and_its_kubeconfig() {
    let plane = plane(ControlPlane::builder()).await;
    assert!(
        plane.url().starts_with("https://127.0.0.1:"),
        "{}",
        plane.url()
    );
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "stores")
        .await
        .expect("a namespace");
    assert!(namespace.starts_with("stores-"), "{namespace}");
    create_config_map(&client, &namespace, "greeting", "hello").await;

    // The kubeconfig file, read as any tool would, reaches the same data.
    let file = Kubeconfig::read_from(plane.kubeconfig_path()).expect("the kubeconfig parses");
    let from_file = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("a config"),
    )
    .expect("a client");
    assert_eq!(value_of(&from_file, &namespace, "greeting").await, "hello");

    let readyz = http::Request::get("/readyz").body(Vec::new()).unwrap();
    let answer = within("readyz", LIMIT, client.request_text(readyz)).await;
    assert_eq!(answer.expect("ready"), "ok");
}

#[tokio::test]
async fn planes_started_together_get_their_own_ports_and_data() {
    let (one, two) = tokio::join!(
        plane(ControlPlane::builder()),
        plane(ControlPlane::builder())
    );
    assert_ne!(one.url(), two.url());
    assert_ne!(one.etcd_url(), two.etcd_url());
    for (plane, value) in [(&one, "one"), (&two, "two")] {
        let client = plane.client().await.expect("a client");
        create_config_map(&client, "default", "owner", value).await;
    }
    for (plane, value) in [(&one, "one"), (&two, "two")] {
        let client = plane.client().await.expect("a client");
        assert_eq!(value_of(&client, "default", "owner").await, value);
    }
}

#[tokio::test]
async fn a_namespace_prefix_that_is_no_dns_label_is_refused() {
    let plane = shared().await;
    let client = plane.client().await.expect("a client");
    let refused = plane.create_namespace(&client, "Not_A_Label").await;
    assert!(
        matches!(refused, Err(HarnessError::Kube { .. })),
        "{refused:?}"
    );
}

/// Two tests on the shared plane, each on its own runtime: whichever runs
/// second uses a plane started on another runtime.
async fn use_the_shared_plane(prefix: &str) {
    let plane = shared().await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    create_config_map(&client, &namespace, "mine", prefix).await;
    assert_eq!(value_of(&client, &namespace, "mine").await, prefix);
}

#[tokio::test]
async fn the_shared_plane_serves_a_first_test() {
    use_the_shared_plane("first").await;
}

#[tokio::test]
async fn the_shared_plane_serves_a_second_test() {
    use_the_shared_plane("second").await;
}

/// Uses the shared plane on a runtime of a thread of its own, which then
/// ends; the API server's process id.
fn use_the_shared_plane_on_a_thread(prefix: &'static str) -> Option<u32> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            use_the_shared_plane(prefix).await;
            shared().await.apiserver_pid()
        })
    })
    .join()
    .expect("the thread")
}

#[test]
fn the_shared_plane_outlives_the_thread_and_runtime_that_started_it() {
    let first = use_the_shared_plane_on_a_thread("before");
    // That thread and its runtime are gone (on Linux, a process dies with
    // the thread that spawned it): the plane is not.
    let second = use_the_shared_plane_on_a_thread("after");
    assert_eq!(first, second, "the same API server process");
}

#[tokio::test(start_paused = true)]
async fn a_plane_starts_under_a_paused_clock() {
    // The harness's waits are its own: tokio's paused clock, which would
    // fire a probe's timeout at once, does not reach them.
    let plane = ControlPlane::start().await.expect("the plane starts");
    assert!(plane.apiserver_pid().is_some());
}

#[tokio::test]
async fn a_restarted_apiserver_keeps_its_data_port_and_clients_and_forgets_its_watch_cache() {
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "restart")
        .await
        .expect("a namespace");
    let version = create_config_map(&client, &namespace, "kept", "across restarts").await;
    // A change after `version`, so that the new cache cannot serve it.
    create_config_map(&client, &namespace, "later", "too").await;
    let (url, pid) = (plane.url(), plane.apiserver_pid());

    within(
        "a restart",
        Duration::from_secs(90),
        plane.restart_apiserver(),
    )
    .await
    .expect("the API server restarts");
    assert_eq!(plane.url(), url, "the same port");
    assert_ne!(plane.apiserver_pid(), pid, "a new process");
    assert_eq!(
        value_of(&client, &namespace, "kept").await,
        "across restarts"
    );
    // The new watch cache starts at etcd's current revision, after the
    // change that followed `version`.
    assert_expired(&first_event(&client, &namespace, &version).await);
}

#[tokio::test]
async fn a_killed_apiserver_refuses_clients_until_started_again() {
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "killed")
        .await
        .expect("a namespace");
    plane.kill_apiserver();
    assert_eq!(plane.apiserver_pid(), None);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let refused = within("a refused list", LIMIT, api.list(&Default::default())).await;
    assert!(refused.is_err(), "no API server answers");

    within("a start", Duration::from_secs(90), plane.start_apiserver())
        .await
        .expect("the API server starts again");
    create_config_map(&client, &namespace, "later", "served").await;
}

#[tokio::test]
async fn compaction_expires_watches_from_older_versions_without_the_watch_cache() {
    let plane = plane(ControlPlane::builder().apiserver_arg("--watch-cache=false")).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "compact")
        .await
        .expect("a namespace");
    let old = create_config_map(&client, &namespace, "old", "1").await;
    create_config_map(&client, &namespace, "new", "2").await;
    // Compaction at revision R keeps R: a watch from `old` needs the
    // revision of `new`, which this later change puts before R.
    create_config_map(&client, &namespace, "newest", "3").await;
    // Before compaction, the old version replays what came after it.
    assert!(matches!(
        first_event(&client, &namespace, &old).await,
        WatchEvent::Added(_)
    ));

    let revision = plane.compact_etcd().await.expect("etcd compacts");
    assert!(
        revision > old.parse().unwrap(),
        "compacted at {revision}, after {old}"
    );
    assert_expired(&first_event(&client, &namespace, &old).await);
    // Compacting again at the same revision is no error.
    plane.compact_etcd().await.expect("compacting twice");
}

#[tokio::test]
async fn compaction_leaves_watches_served_from_the_watch_cache_alone() {
    // What the module docs say of v1.36.2: the watch cache, not etcd,
    // answers a watch from a compacted version that is still in its window.
    let plane = plane(ControlPlane::builder()).await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "cached")
        .await
        .expect("a namespace");
    let old = create_config_map(&client, &namespace, "old", "1").await;
    create_config_map(&client, &namespace, "new", "2").await;
    plane.compact_etcd().await.expect("etcd compacts");
    match first_event(&client, &namespace, &old).await {
        WatchEvent::Added(config_map) => assert_eq!(config_map.metadata.name.unwrap(), "new"),
        other => panic!("expected the cached event, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_apiserver_binary_says_how_to_get_one() {
    let missing = PathBuf::from("/nonexistent/kube-apiserver");
    let error = ControlPlane::builder()
        .apiserver_binary(&missing)
        .start()
        .await
        .expect_err("no binary, no plane");
    let HarnessError::NotInstalled {
        binary,
        var,
        looked_at,
        hint,
    } = &error
    else {
        panic!("expected NotInstalled, got {error:?}");
    };
    assert_eq!(
        (*binary, *var, looked_at.as_str()),
        (
            "kube-apiserver",
            "TEND_KUBE_APISERVER_BIN",
            "/nonexistent/kube-apiserver"
        )
    );
    for needed in [
        "TEND_KUBE_APISERVER_BIN",
        "setup-envtest use 1.36",
        "kube-apiserver.gz",
    ] {
        assert!(hint.contains(needed), "the hint names {needed}: {hint}");
    }
    let message = error.to_string();
    assert!(
        message.starts_with("no `kube-apiserver` binary found"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_etcd_binary_says_how_to_get_one() {
    let error = ControlPlane::builder()
        .etcd_binary("/nonexistent/etcd")
        .start()
        .await
        .expect_err("no etcd, no plane");
    let HarnessError::NotInstalled {
        binary,
        var,
        looked_at,
        hint,
    } = &error
    else {
        panic!("expected NotInstalled, got {error:?}");
    };
    assert_eq!(
        (*binary, *var, looked_at.as_str()),
        ("etcd", "TEND_ETCD_BIN", "/nonexistent/etcd")
    );
    assert!(hint.contains("etcd-server"), "{hint}");
}

/// Run by `an_apiserver_variable_naming_no_file_is_not_installed` in a
/// child process with the variable set (setting it here would race with
/// the other tests, which read it).
#[tokio::test]
#[ignore = "run by an_apiserver_variable_naming_no_file_is_not_installed"]
async fn child_start_with_the_apiserver_variable_naming_no_file() {
    let missing = "/nonexistent/kube-apiserver";
    if std::env::var_os("TEND_KUBE_APISERVER_BIN").is_none_or(|var| var != missing) {
        return; // run by hand (`--ignored`), not by its parent
    }
    let error = ControlPlane::start()
        .await
        .expect_err("no binary, no plane");
    assert!(
        matches!(
            &error,
            HarnessError::NotInstalled { binary: "kube-apiserver", looked_at, .. }
                if looked_at == "TEND_KUBE_APISERVER_BIN=/nonexistent/kube-apiserver"
        ),
        "{error:?}"
    );
}

#[test]
fn an_apiserver_variable_naming_no_file_is_not_installed() {
    let child = "child_start_with_the_apiserver_variable_naming_no_file";
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", child, "--ignored", "--quiet"])
        .env("TEND_KUBE_APISERVER_BIN", "/nonexistent/kube-apiserver")
        .output()
        .expect("the test binary runs");
    assert!(
        output.status.success(),
        "{child} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn a_zero_startup_timeout_fails_with_the_log() {
    let error = ControlPlane::builder()
        .startup_timeout(Duration::ZERO)
        .start()
        .await
        .expect_err("no time, no plane");
    assert!(
        matches!(
            error,
            HarnessError::Unhealthy {
                process: "etcd",
                ..
            }
        ),
        "{error:?}"
    );
}

/// Whether `pid` is a live process (not gone, not a zombie).
#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (name) S ...": the state follows the last parenthesis.
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    !state.starts_with(['Z', 'X'])
}

/// Waits (real time) until neither process lives.
#[cfg(target_os = "linux")]
fn assert_gone(pids: &[u32]) {
    let started = std::time::Instant::now();
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(started.elapsed() < LIMIT, "processes {pids:?} still run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn dropping_a_plane_kills_both_processes_and_removes_its_directory() {
    let plane = plane(ControlPlane::builder()).await;
    let pids = [plane.etcd_pid().unwrap(), plane.apiserver_pid().unwrap()];
    let dir = plane.dir().to_owned();
    assert!(pids.iter().all(|&pid| alive(pid)));
    drop(plane);
    assert_gone(&pids);
    assert!(!dir.exists(), "{} removed", dir.display());
}

/// Set in a copy of this test binary that starts the shared plane and
/// then ends as the variable says (`kill` or `exit`).
const CHILD_VAR: &str = "TEND_KUBE_HARNESS_CHILD";

/// The child's part: start the shared plane, report it, and end without
/// running any destructor: killed (SIGKILL, so no exit hook either), or
/// by `exit`.
#[cfg(target_os = "linux")]
fn child_starts_the_shared_plane_and_ends(how: &str) {
    let plane = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ControlPlane::shared())
        .unwrap();
    // On a line of its own: libtest's "test NAME ... " precedes it.
    println!(
        "\nplane {} {} {}",
        plane.etcd_pid().unwrap(),
        plane.apiserver_pid().unwrap(),
        plane.dir().display()
    );
    if how == "kill" {
        let pid = std::process::id().to_string();
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        std::thread::sleep(Duration::from_secs(60));
    }
    std::process::exit(0);
}

/// Runs `test` of this binary with [`CHILD_VAR`] set to `how`; the pids and
/// directory of the shared plane it started.
#[cfg(target_os = "linux")]
fn run_child(test: &str, how: &str) -> ([u32; 2], PathBuf) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, how)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child test binary runs");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("plane "))
        .expect("the child reports its plane");
    let status = child.wait().unwrap();
    assert_eq!(status.success(), how == "exit", "{status}");
    let mut words = line.split(' ').skip(1);
    let mut pid = || words.next().unwrap().parse::<u32>().unwrap();
    let pids = [pid(), pid()];
    let dir = Path::new(line.splitn(4, ' ').nth(3).unwrap()).to_owned();
    (pids, dir)
}

#[cfg(target_os = "linux")]
#[test]
fn the_shared_plane_dies_with_a_killed_test_binary() {
    if let Ok(how) = std::env::var(CHILD_VAR) {
        return child_starts_the_shared_plane_and_ends(&how);
    }
    let (pids, dir) = run_child("the_shared_plane_dies_with_a_killed_test_binary", "kill");
    assert_gone(&pids);
    // No destructor and no exit hook ran: the directory stays.
    assert!(dir.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn the_shared_plane_is_torn_down_when_a_test_binary_exits() {
    if let Ok(how) = std::env::var(CHILD_VAR) {
        return child_starts_the_shared_plane_and_ends(&how);
    }
    let (pids, dir) = run_child(
        "the_shared_plane_is_torn_down_when_a_test_binary_exits",
        "exit",
    );
    assert_gone(&pids);
    assert!(!dir.exists(), "{} removed at exit", dir.display());
}
