//! The etcd test harness itself: servers started side by side stay apart,
//! a proxy's partition heals without corrupting the connection, and a
//! start that cannot succeed says why.

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use tend::testing::HarnessError;
use tend::testing::etcd::EtcdServer;

use support::{client, server, through_proxy, within};

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_started_together_get_their_own_ports_and_data() {
    let servers = within("four servers", Duration::from_secs(60), async {
        tokio::try_join!(
            EtcdServer::start(),
            EtcdServer::start(),
            EtcdServer::start(),
            EtcdServer::start(),
        )
    })
    .await
    .expect("every server starts");
    let servers = [servers.0, servers.1, servers.2, servers.3];
    let addresses: HashSet<_> = servers.iter().map(EtcdServer::address).collect();
    assert_eq!(addresses.len(), servers.len(), "distinct client ports");
    for (i, server) in servers.iter().enumerate() {
        let mut kv = client(server).await;
        kv.put("owner", i.to_string(), None).await.unwrap();
    }
    for (i, server) in servers.iter().enumerate() {
        let mut kv = client(server).await;
        let owner = kv.get("owner", None).await.unwrap();
        assert_eq!(owner.kvs()[0].value_str().unwrap(), i.to_string());
        let members = kv.member_list().await.unwrap();
        assert_eq!(members.members().len(), 1, "a cluster of one");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_into_a_blackhole_completes_after_the_heal() {
    let etcd = server().await;
    let (proxy, mut kv) = through_proxy(&etcd).await;
    kv.put("before", "1", None).await.unwrap();
    proxy.blackhole(true);
    let pending = tokio::spawn({
        let mut kv = kv.clone();
        async move { kv.put("during", "2", None).await }
    });
    // Shorter than the client's keep-alive interval: the connection stays.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "nothing passes while blackholed");
    proxy.blackhole(false);
    within("the held request to complete", LIMIT, pending)
        .await
        .unwrap()
        .expect("the request lands after the heal");
    let after = within("a request after the heal", LIMIT, kv.get("during", None))
        .await
        .unwrap();
    assert_eq!(after.kvs()[0].value_str().unwrap(), "2");
}

/// Run by `an_etcd_variable_naming_no_file_is_not_installed` in a child
/// process with the variable set (setting it here would race with the
/// other tests, which read it).
#[tokio::test]
#[ignore = "run by an_etcd_variable_naming_no_file_is_not_installed"]
async fn child_start_with_the_etcd_variable_naming_no_file() {
    let missing = "/nonexistent/etcd";
    if std::env::var_os("TEND_ETCD_BIN").is_none_or(|var| var != missing) {
        return; // run by hand (`--ignored`), not by its parent
    }
    let error = EtcdServer::start().await.expect_err("no binary, no server");
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
        ("etcd", "TEND_ETCD_BIN", "TEND_ETCD_BIN=/nonexistent/etcd")
    );
    assert!(hint.contains("apt-get install -y etcd-server"), "{hint}");
    let message = error.to_string();
    assert!(message.starts_with("no `etcd` binary found"), "{message}");
}

#[test]
fn an_etcd_variable_naming_no_file_is_not_installed() {
    let child = "child_start_with_the_etcd_variable_naming_no_file";
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", child, "--ignored", "--quiet"])
        .env("TEND_ETCD_BIN", "/nonexistent/etcd")
        .output()
        .expect("the test binary runs");
    assert!(
        output.status.success(),
        "{child} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_startup_timeout_fails_with_the_log() {
    let error = EtcdServer::builder()
        .startup_timeout(Duration::ZERO)
        .start()
        .await
        .expect_err("no time, no server");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_serves_its_data_on_the_same_address() {
    let etcd = server().await;
    let address = etcd.address();
    client(&etcd).await.put("kept", "1", None).await.unwrap();
    etcd.kill();
    assert!(!etcd.is_running());
    within("etcd to restart", Duration::from_secs(30), etcd.restart())
        .await
        .expect("etcd restarts");
    assert_eq!(etcd.address(), address);
    let kept = client(&etcd).await.get("kept", None).await.unwrap();
    assert_eq!(kept.kvs()[0].value_str().unwrap(), "1");
}
