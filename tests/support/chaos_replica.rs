//! The replica process of the multi-process chaos tests: it stamps every
//! item of the shards it owns with its id, the shard's token and the wanted
//! value, through the fenced client, and logs each reconcile's start and
//! end (wall-clock nanoseconds) for the parent's overlap check.

#![allow(dead_code, unreachable_pub)]

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client;
use tend::etcd::{EtcdMembership, EtcdSource};
use tend::manager::Manager;
use tend::shard::ShardCount;
use tend::testing::etcd::connect;
use tend::{Informer, Revision};

pub use super::chaos_process::wall_ns;
use super::chaos_process::{Log, Span};

pub const GROUP: &str = "chaos";
pub const GROUP_PREFIX: &str = "/chaos/group";
pub const SHARD_RECORDS: &str = "/chaos/group/shards/";
pub const ITEMS: &str = "/chaos/items/";
pub const SHARDS: u32 = 64;

/// An item: `want` is set by the test, the rest by the replica that
/// reconciled it last (`token` 0 after the test's own writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub name: String,
    pub want: u64,
    pub seen: u64,
    pub by: String,
    pub token: u64,
    #[serde(skip)]
    pub version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// Lease 2 s (etcd's minimum), local deadline 1.5 s after a renewal,
/// renewed every 0.5 s.
pub fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

pub fn shards() -> ShardCount {
    ShardCount::new(SHARDS).unwrap()
}

pub fn items(client: etcd_client::Client) -> EtcdSource<Item> {
    EtcdSource::builder("items", client, ITEMS).build()
}

/// The body of a replica process's entry point: exits with the parent
/// (which holds its stdin), runs [`replica`] on two threads, and exits 0
/// on a clean stop, 2 when it stopped on an error.
pub fn run_replica(id: &str, cut: &str, direct: &str, log: &Path, timing: ElectionConfig) -> ! {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = match runtime.block_on(replica(id, cut, direct, log, timing)) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{}: {id} stopped: {error}", wall_ns());
            2
        }
    };
    std::process::exit(code);
}

/// Stamps each item with its replica, the shard's token and the wanted
/// value, through the fenced client.
struct Stamp {
    id: String,
    log: Log,
}

impl Reconciler<Item> for Stamp {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let token = ctx.fencing_token().map_or(0, |token| token.get());
        let key = ctx.key().clone();
        self.log.line(&format!("S {key} {token} {}", wall_ns()));
        let mut span = Span {
            log: &self.log,
            key,
            token,
            outcome: "cancelled",
        };
        // A simulated call elsewhere, longer for the items changed just
        // before a disruption: reconciles are in flight when it comes.
        let changed = ctx.object().is_some_and(|item| item.seen != item.want);
        let call = if changed { 20 } else { 2 };
        tokio::time::sleep(Duration::from_millis(call)).await;
        let result = match ctx.object() {
            Some(item) if item.by != self.id || item.seen != item.want || item.token != token => {
                let client = ctx.client::<Item>().expect("a client for items");
                let stamped = Item {
                    by: self.id.clone(),
                    seen: item.want,
                    token,
                    ..Item::clone(item)
                };
                client.update(stamped).await.map(drop)
            }
            _ => Ok(()),
        };
        span.outcome = match &result {
            Ok(()) => "ok",
            Err(ClientError::Conflict { .. }) => "conflict",
            Err(ClientError::Fenced { .. }) => "fenced",
            Err(_) => "error",
        };
        match result {
            // A newer version is queued again; a lost shard is someone else's.
            Ok(()) | Err(ClientError::Conflict { .. } | ClientError::Fenced { .. }) => {
                Ok(Action::Done)
            }
            Err(error) => Err(error),
        }
    }
}

/// One replica: the membership and the informer through `cut`, the fenced
/// writes through `direct` (the same endpoint, or one the parent does not
/// cut, so that a replica cut off still tries to write).
pub async fn replica(
    id: &str,
    cut: &str,
    direct: &str,
    log: &Path,
    timing: ElectionConfig,
) -> Result<(), String> {
    let cut = connect(cut).await.map_err(|e| e.to_string())?;
    let direct = connect(direct).await.map_err(|e| e.to_string())?;
    let member = EtcdMembership::builder(cut.clone(), GROUP, id, shards())
        .prefix(GROUP_PREFIX)
        .config(timing)
        .build()
        .map_err(|e| e.to_string())?;
    let writer = items(direct).client_fenced_by(&member);
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| e.to_string())?;
    let stamp = Stamp {
        id: id.to_owned(),
        log: Log(Mutex::new(file)),
    };
    // SIGTERM stops it cleanly: its shards drained, released, and left.
    let mut manager = Manager::builder()
        .sharding(member, shards())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let informer = manager
        .informer("items", || Informer::builder(items(cut)).build())
        .map_err(|e| e.to_string())?;
    let controller = manager
        .controller("stamp", &informer, stamp)
        .client(writer)
        .concurrency(NonZeroUsize::new(16).unwrap())
        .build()
        .map_err(|e| e.to_string())?;
    manager
        .add_sharded_controller(controller)
        .map_err(|e| e.to_string())?;
    manager.run().await.map_err(|e| e.to_string())
}
