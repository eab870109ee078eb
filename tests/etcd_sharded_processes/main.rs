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

use std::collections::BTreeMap;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{self, GetOptions, Txn, TxnOp};
use tend::etcd::{EtcdMembership, EtcdSource};
use tend::manager::Manager;
use tend::shard::{Assignment, ShardCount};
use tend::testing::Proxy;
use tend::testing::etcd::connect;
use tend::{Informer, Revision};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use chaos_history::{History, Summary};
use chaos_log::{Death, Reconcile, overlaps, parse_logs};
use support::{client, server};

mod process;

use process::replica;
mod chaos;

const GROUP: &str = "chaos";
const GROUP_PREFIX: &str = "/chaos/group";
const SHARD_RECORDS: &str = "/chaos/group/shards/";
const ITEMS: &str = "/chaos/items/";
const KEYS: usize = 10_000;
const SHARDS: u32 = 64;
const IDS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
/// Items whose desired state changes just before each disruption (in one
/// transaction).
const BUMPS: usize = 120;
/// Items changed every 20 ms meanwhile, until the round converges.
const CHURN: usize = 10;

/// An item: `want` is set by the test, the rest by the replica that
/// reconciled it last (`token` 0 after the test's own writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    name: String,
    want: u64,
    seen: u64,
    by: String,
    token: u64,
    #[serde(skip)]
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// Lease 2 s (etcd's minimum), local deadline 1.5 s after a renewal,
/// renewed every 0.5 s.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn shards() -> ShardCount {
    ShardCount::new(SHARDS).unwrap()
}

fn items(client: etcd_client::Client) -> EtcdSource<Item> {
    EtcdSource::builder("items", client, ITEMS).build()
}

fn wall_ns() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_nanos()).unwrap()
}

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
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = match runtime.block_on(replica(&id, &cut, &direct, log.as_ref())) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{id} stopped: {error}");
            2
        }
    };
    std::process::exit(code);
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

/// Each shard's owner and token (the record's create revision), from etcd.
async fn owners(kv: &mut etcd_client::Client) -> BTreeMap<u32, (String, u64)> {
    let options = GetOptions::new().with_prefix();
    let records = kv.get(SHARD_RECORDS, Some(options)).await.unwrap();
    records
        .kvs()
        .iter()
        .map(|kv| {
            let index = kv.key_str().unwrap().trim_start_matches(SHARD_RECORDS);
            let token = u64::try_from(kv.create_revision()).unwrap();
            (
                index.parse().unwrap(),
                (kv.value_str().unwrap().to_owned(), token),
            )
        })
        .collect()
}

/// Writes the items; returns the revision after the last.
async fn seed(kv: &mut etcd_client::Client) -> i64 {
    let mut revision = 0;
    let names: Vec<String> = (0..KEYS).map(|i| format!("item-{i:05}")).collect();
    for chunk in names.chunks(128) {
        let ops = chunk
            .iter()
            .map(|name| {
                let item = Item {
                    name: name.clone(),
                    want: 1,
                    seen: 0,
                    by: String::new(),
                    token: 0,
                    version: Revision::ZERO,
                };
                let value = serde_json::to_vec(&item).unwrap();
                TxnOp::put(format!("{ITEMS}{name}"), value, None)
            })
            .collect::<Vec<_>>();
        let done = kv.txn(Txn::new().and_then(ops)).await.unwrap();
        revision = done.header().unwrap().revision();
    }
    revision
}

/// Items not stamped by their shard's owner with its token and the
/// wanted value.
async fn unconverged(kv: &mut etcd_client::Client, items: &Client<Item>) -> (usize, usize) {
    let owners = owners(kv).await;
    let snapshot = items.list().await.unwrap();
    let bad = snapshot
        .objects
        .iter()
        .filter(|item| {
            let shard = shards().shard_of(&item.name).index();
            let owner = owners.get(&shard);
            item.seen != item.want
                || owner.is_none_or(|(id, token)| *id != item.by || *token != item.token)
        })
        .count();
    (bad, SHARDS as usize - owners.len())
}

/// Waits (bounded) until every key is converged.
async fn converge(kv: &mut etcd_client::Client, items: &Client<Item>, what: &str) -> Duration {
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let (bad, unowned) = unconverged(kv, items).await;
        if bad == 0 && unowned == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {bad} of {KEYS} keys not converged and {unowned} shards unowned after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Changes the wanted value of `count` random items at once, in one
/// transaction (an unfenced write, token 0; a replica's stamp landing
/// meanwhile is overwritten, and restamped: the item is reconciled again).
async fn bump(kv: &mut etcd_client::Client, rng: &mut u64, count: usize) {
    let mut picked = std::collections::BTreeSet::new();
    while picked.len() < count {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        picked.insert(*rng % KEYS as u64);
    }
    let mut ops = Vec::with_capacity(count);
    for index in picked {
        let key = format!("{ITEMS}item-{index:05}");
        let found = kv.get(key.as_str(), None).await.unwrap();
        let value = found.kvs().first().expect("the item exists").value();
        let mut item: Item = serde_json::from_slice(value).unwrap();
        item.want += 1;
        item.token = 0;
        ops.push(TxnOp::put(key, serde_json::to_vec(&item).unwrap(), None));
    }
    kv.txn(Txn::new().and_then(ops)).await.unwrap();
}

/// Waits until none of `theirs` is owned by `id`; returns how long each
/// took from `since`.
async fn reowned(
    kv: &mut etcd_client::Client,
    id: &str,
    mut theirs: Vec<u32>,
    since: Instant,
) -> Vec<Duration> {
    let limit = Duration::from_secs(15);
    let mut took = Vec::new();
    while !theirs.is_empty() {
        let owners = owners(kv).await;
        theirs.retain(|shard| {
            let taken = owners.get(shard).is_some_and(|(owner, _)| owner != id);
            if taken {
                took.push(since.elapsed());
            }
            !taken
        });
        assert!(
            since.elapsed() < limit,
            "{} of {id}'s shards still not owned by another replica after {limit:?}",
            theirs.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took
}
