//! tend's sharding on a three-member etcd cluster, each member in a network
//! namespace of its own with its data on a disk that can be paused, and a
//! sharded replica beside it that talks to that member only. Rounds of
//! faults a single member cannot show: a host (member and replica) cut off
//! from the majority, the etcd leader's host cut off, a member killed and
//! restarted, a member's disk frozen, a replica killed or stopped. The
//! checks are the chaos test's: no key reconciled by two processes at once
//! (their logs), no write with a stale shard token accepted (etcd's own
//! history), every key converged after each round, and how long a lost
//! replica's shards stay unowned (p50/p99; from the disruption, or from
//! the next election when the round cost the cluster its leader).
//!
//! Needs root (`ip netns`, loop mounts, `fsfreeze`): where namespaces cannot
//! be made it skips, saying why, unless `TEND_REQUIRE_NETNS` is set (as in
//! `.ci/run`). The test itself creates the namespaces and disks and then
//! runs this binary again inside an observer namespace on the same bridge
//! (`cluster_observer`), which starts the members and replicas
//! (`cluster_replica`) and runs the rounds. `TEND_CLUSTER_ROUNDS` sets the
//! rounds (default 12); `TEND_CLUSTER_KEEP` keeps the members' and
//! replicas' logs.

#![cfg(feature = "etcd")]

#[path = "../support/chaos_history.rs"]
mod chaos_history;

#[path = "../support/chaos_log.rs"]
mod chaos_log;

#[path = "../support/chaos_process.rs"]
mod chaos_process;

#[path = "../support/chaos_replica.rs"]
mod chaos_replica;

#[path = "../support/chaos_world.rs"]
mod chaos_world;

#[path = "../support/command.rs"]
mod command;

#[path = "../support/frozen_disk.rs"]
mod frozen_disk;

#[path = "../support/netns.rs"]
mod netns;

mod disruptions;
mod members;
mod observer;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use frozen_disk::Disk;
use netns::Network;
use tend::election::ElectionConfig;

/// The member hosts, each with a replica; the observer's host is apart.
const HOSTS: [&str; 3] = ["h1", "h2", "h3"];
const OBSERVER: &str = "observer";
const IDS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
const KEYS: usize = 3_000;
/// How long the whole run may take, in real time.
const LIMIT: Duration = Duration::from_secs(8 * 60);

fn all_hosts() -> Vec<&'static str> {
    HOSTS.iter().copied().chain([OBSERVER]).collect()
}

/// The network and the members' disks, removed in that order (every
/// process in the network killed before its disk is unmounted), also when
/// the test panics.
struct Premises {
    network: Network,
    _disks: Vec<Disk>,
}

/// The premises; or why they cannot be made here.
fn premises(dir: &std::path::Path) -> Result<Premises, String> {
    let network = Network::create("c", &all_hosts())?;
    let disks = HOSTS
        .iter()
        .map(|host| Disk::create(dir, host, 1024))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Premises {
        network,
        _disks: disks,
    })
}

#[test]
fn sharded_replicas_on_a_partitioned_etcd_cluster_never_overlap_nor_write_stale() {
    let dir = tempfile::tempdir().unwrap();
    let premises = match premises(dir.path()) {
        Ok(premises) => premises,
        Err(why) if std::env::var_os("TEND_REQUIRE_NETNS").is_none() => {
            eprintln!("skipped: network namespaces and loop disks cannot be made here ({why})");
            return;
        }
        Err(why) => panic!("TEND_REQUIRE_NETNS is set, but the lab cannot be made: {why}"),
    };
    let network = &premises.network;
    let mut child = network
        .host(OBSERVER)
        .command(std::env::current_exe().unwrap())
        .args(["cluster_observer", "--exact", "--ignored", "--nocapture"])
        .env("TEND_CLUSTER_NETWORK", network.prefix())
        .env("TEND_CLUSTER_DIR", dir.path())
        .spawn()
        .expect("the observer starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("the cluster test took over {LIMIT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(premises);
    if std::env::var_os("TEND_CLUSTER_KEEP").is_some() {
        eprintln!("the logs are kept in {}", dir.keep().display());
    }
    assert!(
        status.success(),
        "the observer failed ({status}): see above"
    );
}

/// The observer process (see the module docs).
#[test]
#[ignore = "the observer of the etcd-cluster test, started by it"]
fn cluster_observer() {
    let Some(prefix) = std::env::var_os("TEND_CLUSTER_NETWORK") else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os("TEND_CLUSTER_DIR").expect("the directory"));
    let network = Network::attach(prefix.to_str().unwrap(), &all_hosts());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(observer::run(&network, &dir));
}

/// A replica process, on its member's host (see the module docs).
#[test]
#[ignore = "a replica process of the etcd-cluster test, started by it"]
fn cluster_replica() {
    let Ok(id) = std::env::var("TEND_CHAOS_REPLICA") else {
        return;
    };
    let log = std::env::var("TEND_CHAOS_LOG").expect("TEND_CHAOS_LOG is set");
    // Its own member, on loopback inside the host's namespace.
    let member = "http://127.0.0.1:2379";
    chaos_replica::run_replica(&id, member, member, log.as_ref(), timing());
}

/// Lease 4 s, local deadline 3 s after a renewal, renewed every 0.5 s: a
/// replica rides out 2.5 s without an etcd leader (an election), where the
/// single-member test's 2 s lease would not.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(4),
        Duration::from_secs(3),
        Duration::from_millis(500),
    )
    .unwrap()
}

/// The replica entry point, as a command to run on `host`.
fn replica_command(host: &netns::Host) -> Command {
    let mut command = host.command(std::env::current_exe().unwrap());
    command.args(["cluster_replica", "--exact", "--ignored", "--nocapture"]);
    command
}
