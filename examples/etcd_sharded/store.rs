//! The demo's state in etcd: the items seeded, the shards' owners read
//! from the membership's records, the items stamped by their owner.

use std::collections::BTreeMap;
use std::time::Duration;

use tend::BoxError;
use tend::Revision;
use tend::client::Client;
use tend::etcd::etcd_client::{self, DeleteOptions, GetOptions, Txn, TxnOp};
use tokio::time::Instant;

use crate::{ITEMS, Item, KEYS, PREFIX, SHARDS, shards};

/// Replaces the demo's keys by `KEYS` fresh items (batched: etcd allows
/// 128 operations per transaction).
pub(crate) async fn seed(kv: &mut etcd_client::Client) -> Result<(), BoxError> {
    kv.delete(
        "/tend-demo-sharded/",
        Some(DeleteOptions::new().with_prefix()),
    )
    .await?;
    let names: Vec<String> = (0..KEYS).map(|i| format!("item-{i:04}")).collect();
    for chunk in names.chunks(128) {
        let mut ops = Vec::with_capacity(chunk.len());
        for name in chunk {
            let item = Item {
                name: name.clone(),
                by: String::new(),
                version: Revision::ZERO,
            };
            ops.push(TxnOp::put(
                format!("{ITEMS}{name}"),
                serde_json::to_vec(&item)?,
                None,
            ));
        }
        kv.txn(Txn::new().and_then(ops)).await?;
    }
    Ok(())
}

/// Each shard's owner, read from the ownership records in etcd.
pub(crate) async fn owners(
    kv: &mut etcd_client::Client,
) -> Result<BTreeMap<u32, String>, BoxError> {
    let prefix = format!("{PREFIX}/shards/");
    let records = kv
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut owners = BTreeMap::new();
    for kv in records.kvs() {
        let index = kv.key_str()?.trim_start_matches(&prefix).parse()?;
        owners.insert(index, kv.value_str()?.to_owned());
    }
    Ok(owners)
}

/// How many shards each replica owns: `replica-1 22, replica-3 21, …`.
pub(crate) fn shares(owners: &BTreeMap<u32, String>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for owner in owners.values() {
        *counts.entry(owner).or_default() += 1;
    }
    let unowned = SHARDS as usize - owners.len();
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{r} {n}")).collect();
    if unowned > 0 {
        parts.push(format!("unowned {unowned}"));
    }
    parts.join(", ")
}

/// Items stamped by the current owner of their shard.
pub(crate) async fn converged(
    items: &Client<Item>,
    owners: &BTreeMap<u32, String>,
) -> Result<usize, BoxError> {
    let shards = shards();
    let snapshot = items.list().await?;
    Ok(snapshot
        .objects
        .iter()
        .filter(|item| {
            let shard = shards.shard_of(&item.name).index();
            owners.get(&shard).is_some_and(|owner| *owner == item.by)
        })
        .count())
}

/// Waits (bounded) until every item is stamped by its shard's owner;
/// returns how many are.
pub(crate) async fn settle(
    kv: &mut etcd_client::Client,
    items: &Client<Item>,
) -> Result<usize, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let owners = owners(kv).await?;
        let stamped = converged(items, &owners).await?;
        if stamped == KEYS || Instant::now() >= deadline {
            return Ok(stamped);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
