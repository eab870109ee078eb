//! etcd's own history of a chaos run: every shard record's life and every
//! item write, read in revision order. A replica's write (token ≠ 0) is
//! stale unless its shard's record, created at that token and owned by the
//! writer, is alive at the write's revision.

#![allow(unreachable_pub)]

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use std::sync::Arc;
use tend::etcd::etcd_client::{self, EventType, WatchOptions};
use tend::shard::ShardCount;
use tokio::task::JoinHandle;

/// What the history showed.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Writes by replicas (with a shard token) that etcd accepted.
    pub fenced_writes: usize,
    /// Of those, the ones whose token was not its shard's live record's
    /// (or whose writer did not own that record).
    pub stale_writes: usize,
    /// The last revision read.
    pub revision: i64,
}

/// The part of an item the check reads.
#[derive(Deserialize)]
struct Written {
    name: String,
    by: String,
    token: u64,
}

/// A task reading the history of a prefix from a revision on.
pub struct History {
    summary: Arc<Mutex<Summary>>,
    task: JoinHandle<()>,
}

impl History {
    /// Reads `{prefix}group/shards/…` and `{prefix}items/…` from `from`.
    pub fn follow(
        client: etcd_client::Client,
        prefix: &str,
        from: i64,
        shards: ShardCount,
    ) -> Self {
        let summary = Arc::new(Mutex::new(Summary::default()));
        let task = tokio::spawn(read(
            client,
            prefix.to_owned(),
            from,
            shards,
            Arc::clone(&summary),
        ));
        Self { summary, task }
    }

    /// Waits (bounded) until revision `end` was read.
    pub async fn until(self, end: i64) -> Summary {
        let limit = Duration::from_secs(30);
        let started = tokio::time::Instant::now();
        loop {
            let summary = self.summary.lock().clone();
            if summary.revision >= end {
                self.task.abort();
                return summary;
            }
            assert!(
                !self.task.is_finished(),
                "the history's watch ended at {}",
                summary.revision
            );
            assert!(
                started.elapsed() < limit,
                "the history reached {} of {end} within {limit:?}",
                summary.revision
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn read(
    mut client: etcd_client::Client,
    prefix: String,
    from: i64,
    shards: ShardCount,
    summary: Arc<Mutex<Summary>>,
) {
    let records = format!("{prefix}group/shards/");
    let items = format!("{prefix}items/");
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(from)
        .with_progress_notify();
    let mut stream = client
        .watch(prefix.as_str(), Some(options))
        .await
        .expect("the history's watch");
    // Each shard's live record: (token, owner).
    let mut live: HashMap<u32, (u64, String)> = HashMap::new();
    while let Some(response) = stream.message().await.expect("the history's watch") {
        let mut summary = summary.lock();
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let key = kv.key_str().expect("a UTF-8 key");
            if let Some(index) = key.strip_prefix(records.as_str()) {
                let index: u32 = index.parse().expect("a shard index");
                match event.event_type() {
                    EventType::Put => {
                        let token = u64::try_from(kv.create_revision()).expect("a revision");
                        live.insert(index, (token, kv.value_str().expect("an id").to_owned()));
                    }
                    EventType::Delete => drop(live.remove(&index)),
                }
            } else if key.starts_with(items.as_str()) && event.event_type() == EventType::Put {
                check_write(kv, &live, shards, &mut summary);
            }
            summary.revision = summary.revision.max(kv.mod_revision());
        }
        if let Some(header) = response.header() {
            // A progress notification or an empty response moves it too.
            if response.events().is_empty() {
                summary.revision = summary.revision.max(header.revision());
            }
        }
    }
}

/// One item write: a replica's (token ≠ 0) must carry its shard's live
/// record's token, and be its owner's.
fn check_write(
    kv: &etcd_client::KeyValue,
    live: &HashMap<u32, (u64, String)>,
    shards: ShardCount,
    summary: &mut Summary,
) {
    let written: Written = serde_json::from_slice(kv.value()).expect("an item");
    if written.token == 0 {
        return;
    }
    summary.fenced_writes += 1;
    let current = live.get(&shards.shard_of(&written.name).index());
    if current.is_none_or(|(token, owner)| *token != written.token || *owner != written.by) {
        eprintln!(
            "stale write at {}: {} by {} with token {}, live record {current:?}",
            kv.mod_revision(),
            written.name,
            written.by,
            written.token
        );
        summary.stale_writes += 1;
    }
}
