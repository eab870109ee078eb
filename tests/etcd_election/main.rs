//! The etcd client's writes and leader election against a real etcd on loopback:
//! conflicts, fencing, failover (tasks and SIGKILLed processes) and a
//! leader cut off from etcd.

#![cfg(feature = "etcd")]

#[path = "../support/etcd.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tend::client::{ClientError, FencingToken};
use tend::election::{ElectionConfig, LeaderElector};
use tend::etcd::etcd_client::{Client, GetOptions};
use tend::etcd::{ElectionBuildError, EtcdElection};
use tend::testing::etcd::connect;
use tokio::time::Instant;

use support::{Item, client, server, source, through_proxy, within};

mod failover;
mod fencing;
mod keys;
mod processes;

const LIMIT: Duration = Duration::from_secs(10);
const ELECTION: &str = "test-election";
const ELECTION_PREFIX: &str = "tend/elections/test-election/";

/// Short timings for tests: lease 2 s (etcd's minimum), renew deadline
/// 1.5 s, retry period 0.5 s.
fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn candidate(client: Client, identity: &str) -> EtcdElection {
    EtcdElection::builder(client, ELECTION)
        .identity(identity)
        .config(fast())
        .build()
        .expect("a valid election name")
}

/// The lease of the current leader key, from etcd.
async fn leader_lease(kv: &mut Client) -> i64 {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(
            tend::etcd::etcd_client::SortTarget::Create,
            tend::etcd::etcd_client::SortOrder::Ascend,
        )
        .with_limit(1);
    let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
    response.kvs().first().expect("a leader key").lease()
}

/// The replica process of the SIGKILL test: campaigns, prints `LEADER
/// <token>` once elected, and idles. Runs only when spawned by that test.
#[test]
#[ignore = "run as a child process by replicas_as_processes_fail_over_after_sigkill"]
fn replica_process() {
    let Ok(endpoint) = std::env::var("TEND_TEST_REPLICA_ENDPOINT") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = connect(&endpoint).await.unwrap();
        let election = candidate(client, &format!("pid-{}", std::process::id()));
        let token = election.campaign().await.unwrap();
        println!("LEADER {} {token}", std::process::id());
        election.lost().await;
        println!("LOST {}", std::process::id());
    });
}
