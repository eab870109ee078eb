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

#[path = "../support/chaos_replica.rs"]
mod chaos_replica;

#[path = "../support/chaos_world.rs"]
mod chaos_world;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tend::client::Client;
use tend::etcd::etcd_client;
use tend::testing::Proxy;
use tokio::time::Instant;

use chaos_history::{History, Summary};
use chaos_log::{Death, Reconcile, overlaps, parse_logs};
use chaos_replica::{Item, items, run_replica, shards, timing, wall_ns};
use chaos_world::{
    bump, churn, converge, owns_its_share, percentile, reowned, seed, shards_of, signal,
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
    run_replica(&id, &cut, &direct, log.as_ref());
}

// ---- the parent ----

/// A replica as the parent sees it: its proxies, its process, its lives.
struct Replica {
    id: &'static str,
    /// Its membership's and informer's way to etcd.
    proxy: Proxy,
    /// Its writes' way to etcd.
    writes: Proxy,
    child: Option<Child>,
    lives: u32,
    dir: PathBuf,
}

impl Replica {
    fn log_path(&self, life: u32) -> PathBuf {
        self.dir.join(format!("{}.{life}.log", self.id))
    }

    fn start(&mut self) {
        self.lives += 1;
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["chaos_replica", "--exact", "--ignored", "--nocapture"])
            .env("TEND_CHAOS_REPLICA", self.id)
            .env("TEND_CHAOS_CUT", self.proxy.endpoint())
            .env("TEND_CHAOS_ETCD", self.writes.endpoint())
            .env("TEND_CHAOS_LOG", self.log_path(self.lives))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the replica process starts");
        self.child = Some(child);
    }

    /// SIGKILL; returns when the process is gone.
    fn kill(&mut self) -> Death {
        let mut child = self.child.take().expect("the replica runs");
        child.kill().unwrap();
        child.wait().unwrap();
        self.death()
    }

    /// Waits (bounded) for the process to exit on its own.
    async fn exited(&mut self, limit: Duration) -> Death {
        let started = Instant::now();
        let child = self.child.as_mut().expect("the replica runs");
        while child.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < limit,
                "{} did not stop within {limit:?} of losing its membership",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.child = None;
        self.death()
    }

    fn death(&self) -> Death {
        Death {
            log: self.log_path(self.lives),
            at: wall_ns(),
            paused: false,
        }
    }
}
