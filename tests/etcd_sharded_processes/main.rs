//! Three sharded replicas as separate processes on one real etcd, through
//! rounds of SIGKILL and of blackholing one replica from etcd: no key is
//! reconciled by two processes at once (from their logs), etcd accepts no
//! write with a stale shard token (from etcd's own history), every key
//! converges after each round, and a lost replica's shards are owned again
//! within the lease + 1 s (p50/p99 printed).
//!
//! The replicas are this test binary run again with `chaos_replica` as its
//! only test (an ignored test that does nothing unless the parent set its
//! environment). Each reaches etcd twice: its membership and informer
//! through a [`Proxy`] the parent can blackhole, its fenced writes directly,
//! so a replica cut off from etcd still tries to write (and must be
//! refused). `TEND_CHAOS_ROUNDS` sets the rounds (default 50).

#![cfg(feature = "etcd")]

#[path = "../support/etcd.rs"]
mod support;

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

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tend::client::Client;
use tend::etcd::etcd_client;
use tend::testing::Proxy;
use tokio::time::Instant;

use chaos_history::History;
use chaos_log::{Death, parse_logs};
use chaos_replica::{Item, items, run_replica, shards, timing};
use chaos_world::{
    Process, Rounds, bump, check, churn, converge, owns_its_share, reowned, revision_now, seed,
    shards_of, signal,
};
use support::{client, server};

mod chaos;

const KEYS: usize = 10_000;
const IDS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
/// Items whose desired state changes just before each disruption (in one
/// transaction).
const BUMPS: usize = 120;
/// Items changed every 20 ms meanwhile, until the round converges.
const CHURN: usize = 10;

/// The replica process's entry point (see the module docs).
#[test]
#[ignore = "a replica process of the chaos test, started by it"]
fn chaos_replica() {
    let Ok(id) = std::env::var("TEND_CHAOS_REPLICA") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let (cut, direct, log) = (
        var("TEND_CHAOS_CUT"),
        var("TEND_CHAOS_ETCD"),
        var("TEND_CHAOS_LOG"),
    );
    // The parent holds this process's stdin: its end (or the parent's
    // death) ends the replica.
    run_replica(&id, &cut, &direct, log.as_ref(), timing());
}

// ---- the parent ----

/// A replica as the parent sees it: its proxies and its process.
struct Replica {
    /// Its membership's and informer's way to etcd.
    proxy: Proxy,
    /// Its writes' way to etcd.
    writes: Proxy,
    process: Process,
}

impl Replica {
    fn start(&mut self) {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["chaos_replica", "--exact", "--ignored", "--nocapture"])
            .env("TEND_CHAOS_CUT", self.proxy.endpoint())
            .env("TEND_CHAOS_ETCD", self.writes.endpoint());
        self.process.start(command);
    }
}
