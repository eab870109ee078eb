//! The parent's side of the multi-process chaos tests: the items it seeds
//! and changes, the shard owners it reads from etcd, and its bounded waits
//! for ownership and convergence.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tend::Revision;
use tend::client::Client;
use tend::etcd::etcd_client::{self, GetOptions, Txn, TxnOp};
use tend::shard::Assignment;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::chaos_history::Summary;
use super::chaos_log::{Death, Reconcile, overlaps};
pub use super::chaos_process::{Process, percentile, signal};
use super::chaos_replica::{ITEMS, Item, SHARD_RECORDS, SHARDS, shards};

/// Each shard's owner and token (the record's create revision), from etcd.
pub async fn owners(kv: &mut etcd_client::Client) -> BTreeMap<u32, (String, u64)> {
    let options = GetOptions::new().with_prefix();
    let records = retry("reading the shard records", || {
        let (mut kv, options) = (kv.clone(), options.clone());
        async move { kv.get(SHARD_RECORDS, Some(options)).await }
    })
    .await;
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

fn name(index: u64) -> String {
    format!("item-{index:05}")
}

/// etcd's revision now (the end of a run's history).
pub async fn revision_now(kv: &mut etcd_client::Client) -> i64 {
    let answer = kv.get("/", None).await.expect("etcd answers");
    answer.header().expect("a header").revision()
}

/// Writes `keys` items; returns the revision after the last.
pub async fn seed(kv: &mut etcd_client::Client, keys: usize) -> i64 {
    let mut revision = 0;
    let names: Vec<String> = (0..keys as u64).map(name).collect();
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
        let done = retry("seeding", || {
            let (mut kv, ops) = (kv.clone(), ops.clone());
            async move { kv.txn(Txn::new().and_then(ops)).await }
        })
        .await;
        revision = done.header().unwrap().revision();
    }
    revision
}

/// Items not stamped by their shard's owner with its token and the
/// wanted value, and shards without an owner.
pub async fn unconverged(kv: &mut etcd_client::Client, items: &Client<Item>) -> (usize, usize) {
    let owners = owners(kv).await;
    let snapshot = retry("listing the items", || items.list()).await;
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

/// Waits (bounded) until every key is converged; returns how long it took.
pub async fn converge(kv: &mut etcd_client::Client, items: &Client<Item>, what: &str) -> Duration {
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let (bad, unowned) = unconverged(kv, items).await;
        if bad == 0 && unowned == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {bad} keys not converged and {unowned} shards unowned after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Changes the wanted value of `count` random items of the first `keys` at
/// once, in one transaction (an unfenced write, token 0; a replica's stamp
/// landing meanwhile is overwritten, and restamped: the item is reconciled
/// again).
pub async fn bump(kv: &mut etcd_client::Client, rng: &mut u64, count: usize, keys: usize) {
    let mut picked = BTreeSet::new();
    while picked.len() < count.min(keys) {
        picked.insert(next_random(rng) % keys as u64);
    }
    let mut ops = Vec::with_capacity(count);
    for index in picked {
        let key = format!("{ITEMS}{}", name(index));
        let found = retry("reading an item", || {
            let (mut kv, key) = (kv.clone(), key.clone());
            async move { kv.get(key, None).await }
        })
        .await;
        let value = found.kvs().first().expect("the item exists").value();
        let mut item: Item = serde_json::from_slice(value).unwrap();
        item.want += 1;
        item.token = 0;
        ops.push(TxnOp::put(key, serde_json::to_vec(&item).unwrap(), None));
    }
    retry("changing items", || {
        let (mut kv, ops) = (kv.clone(), ops.clone());
        async move { kv.txn(Txn::new().and_then(ops)).await }
    })
    .await;
}

/// The next of a xorshift sequence (the tests' choices, reproducible from
/// a seed).
pub fn next_random(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Retries `attempt` (a request to etcd, each bounded to 5 s) for up to
/// 20 s: a cluster refuses or stalls requests while it elects a leader.
pub async fn retry<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let limit = Duration::from_secs(20);
    let started = Instant::now();
    loop {
        let failed = match tokio::time::timeout(Duration::from_secs(5), attempt()).await {
            Ok(Ok(done)) => return done,
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer within 5 s".to_owned(),
        };
        assert!(
            started.elapsed() < limit,
            "{what} failed for {limit:?}, last: {failed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The shards `id` owns now.
pub async fn shards_of(kv: &mut etcd_client::Client, id: &str) -> Vec<u32> {
    owners(kv)
        .await
        .into_iter()
        .filter(|(_, (owner, _))| owner == id)
        .map(|(shard, _)| shard)
        .collect()
}

/// Waits until none of `theirs` is owned by `id`; returns how long each
/// took from `since`.
pub async fn reowned(
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

/// Changes `count` items every 20 ms while the returned gate is not held,
/// so that handovers find reconciles in flight.
pub fn churn(
    mut kv: etcd_client::Client,
    mut rng: u64,
    count: usize,
    keys: usize,
) -> (Arc<tokio::sync::Mutex<()>>, JoinHandle<()>) {
    let gate = Arc::new(tokio::sync::Mutex::new(()));
    let held = Arc::clone(&gate);
    let task = tokio::spawn(async move {
        loop {
            {
                let _open = held.lock().await;
                bump(&mut kv, &mut rng, count, keys).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (gate, task)
}

/// How many shards `id` owns when all of `ids` are members.
pub fn share(id: &str, ids: &[&str]) -> usize {
    Assignment::compute(ids.iter().copied(), shards())
        .shards_of(id)
        .count()
}

/// Waits (bounded) until `id` owns its whole share of the shards among
/// `ids`.
pub async fn owns_its_share(kv: &mut etcd_client::Client, id: &str, ids: &[&str]) {
    let share = share(id, ids);
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    loop {
        let owned = shards_of(kv, id).await.len();
        if owned == share {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{id} owns {owned} of its {share} shards after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the rounds measured.
#[derive(Default)]
pub struct Rounds {
    pub deaths: Vec<Death>,
    /// How long a lost replica's shards stayed unowned.
    pub unowned: Vec<Duration>,
    /// How long a cleanly stopped replica's shards stayed unowned.
    pub handed: Vec<Duration>,
}

/// Reports the run and asserts its claims: no overlap, no stale write
/// accepted, and a lost replica's shards owned again within `bound` (p99).
pub fn check(
    rounds: usize,
    reconciles: &[Reconcile],
    history: &Summary,
    measured: Rounds,
    bound: Duration,
) {
    let Rounds {
        deaths,
        mut unowned,
        mut handed,
    } = measured;
    let (overlapping, paused) = overlaps(reconciles, &deaths);
    unowned.sort();
    handed.sort();
    let count = |outcomes: &[&str]| {
        reconciles
            .iter()
            .filter(|r| outcomes.contains(&r.outcome.as_str()))
            .count()
    };
    let (fenced, cut) = (count(&["fenced"]), count(&["killed", "cancelled"]));
    eprintln!(
        "{rounds} rounds: {} reconciles logged, {overlapping} overlapping across processes \
         (besides {paused} of paused processes, spanning the handover, none written); \
         {} fenced writes accepted by etcd, {} with a stale token; {fenced} writes refused as fenced; \
         {cut} reconciles cut by a kill or cancelled; \
         shards unowned after a kill, cut-off or pause: p50 {:?}, p99 {:?}, max {:?} ({} handovers); \
         after a clean stop: p50 {:?}, p99 {:?} ({} handovers)",
        reconciles.len(),
        history.fenced_writes,
        history.stale_writes,
        percentile(&unowned, 0.5),
        percentile(&unowned, 0.99),
        unowned.last().copied().unwrap_or_default(),
        unowned.len(),
        percentile(&handed, 0.5),
        percentile(&handed, 0.99),
        handed.len(),
    );
    assert_eq!(
        overlapping, 0,
        "reconciles of one key overlapped across processes"
    );
    assert_eq!(
        history.stale_writes, 0,
        "etcd accepted writes with a stale token"
    );
    assert!(
        history.fenced_writes > 0,
        "the history saw the replicas' writes"
    );
    assert!(
        percentile(&unowned, 0.99) <= bound,
        "a lost replica's shards stayed unowned longer than {bound:?} (p99)"
    );
}
