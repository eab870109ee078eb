//! The Kubernetes control plane harness itself: it serves, it is shared
//! across test runtimes, its API server restarts, compaction expires old
//! watches, a missing binary says how to get one, and its processes never
//! outlive their owner.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`).

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
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

mod binaries;
mod planes;
mod restarts;

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
