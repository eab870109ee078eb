//! Three replicas sharing the keys of one controller through an etcd
//! membership: each reconciles only the keys of the shards it owns, and
//! caches only their items, every write fenced in etcd with the shard's
//! token. One replica is killed
//! mid-run (no leave: its lease must expire) and the others take its
//! shards over. The handover's checks are in `handover.rs`, the demo's
//! keys in etcd in `store.rs`.
//!
//! ```sh
//! # starts its own etcd (needs the `etcd` binary: apt-get install -y etcd-server)
//! cargo run --example etcd_sharded --features etcd -- --embedded
//! cargo run --example etcd_sharded --features etcd -- --embedded --duration 30
//! # against a running etcd (its keys under /tend-demo-sharded are replaced)
//! cargo run --example etcd_sharded --features etcd -- --endpoint http://127.0.0.1:2379
//! ```

#[path = "../support/etcd.rs"]
mod etcd;
mod handover;
mod store;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::{ClientError, FencingToken};
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client;
use tend::etcd::{EtcdMembership, EtcdSource};
use tend::manager::Manager;
use tend::shard::{Membership, ShardCount};
use tend::testing::etcd::connect;
use tend::{BoxError, Informer, Revision};
use tokio::time::Instant;

use etcd::Etcd;
use handover::{Running, kill, overlaps, stale_write};
use store::{converged, owners, seed, settle, shares};

const GROUP: &str = "stampers";
/// The membership's records: `{PREFIX}/members/…` and `{PREFIX}/shards/…`.
const PREFIX: &str = "/tend-demo-sharded/group";
const ITEMS: &str = "/tend-demo-sharded/items/";
const KEYS: usize = 3000;
const SHARDS: u32 = 64;
const REPLICAS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
/// The replica killed halfway.
const VICTIM: &str = "replica-2";

/// An item, stamped by the replica that reconciled it last.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    name: String,
    by: String,
    #[serde(skip)]
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// One reconcile, as the log records it (times since the start).
#[derive(Debug, Clone)]
struct Record {
    replica: String,
    key: String,
    token: Option<FencingToken>,
    start: Duration,
    end: Duration,
}

type Log = Arc<Mutex<Vec<Record>>>;

/// Stamps each item with its replica's name through the fenced client,
/// after a short pause that leaves reconciles in flight at handovers.
struct Stamp {
    replica: String,
    log: Log,
    epoch: Instant,
}

impl Reconciler<Item> for Stamp {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let start = self.epoch.elapsed();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let written = match ctx.object().filter(|item| item.by != self.replica) {
            Some(item) => {
                let client = ctx.client::<Item>().expect("a client for items");
                let stamped = Item {
                    by: self.replica.clone(),
                    ..Item::clone(item)
                };
                client.update(stamped).await.map(drop)
            }
            None => Ok(()),
        };
        self.log.lock().push(Record {
            replica: self.replica.clone(),
            key: ctx.key().clone(),
            token: ctx.fencing_token(),
            start,
            end: self.epoch.elapsed(),
        });
        match written {
            // A newer version is queued again; a lost shard is someone else's.
            Ok(()) | Err(ClientError::Conflict { .. } | ClientError::Fenced { .. }) => {
                Ok(Action::Done)
            }
            Err(error) => Err(error),
        }
    }
}

/// Lease 2 s (etcd's minimum), local deadline 1.5 s after a renewal,
/// renewed every 0.5 s.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .expect("valid timing")
}

fn shards() -> ShardCount {
    ShardCount::new(SHARDS).expect("a valid shard count")
}

fn items(client: etcd_client::Client) -> EtcdSource<Item> {
    EtcdSource::builder("items", client, ITEMS).build()
}

fn membership(client: etcd_client::Client, name: &str) -> Result<EtcdMembership, BoxError> {
    Ok(EtcdMembership::builder(client, GROUP, name, shards())
        .prefix(PREFIX)
        .config(timing())
        .build()?)
}

/// One replica's manager: its own etcd client and membership, one sharded
/// controller writing through a client fenced by the membership.
async fn replica(
    client: etcd_client::Client,
    member: EtcdMembership,
    log: &Log,
    epoch: Instant,
) -> Result<Manager, BoxError> {
    let name = member.id().to_string();
    let source = items(client);
    let writer = source.client_fenced_by(&member);
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(member, shards())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()?;
    // Each replica caches only the items of the shards it keeps.
    let scope = manager
        .sharding()
        .ok_or("built with a membership")?
        .cache_scope();
    let informer = manager.informer("items", || Informer::builder(source).scope(scope).build())?;
    let stamp = Stamp {
        replica: name,
        log: Arc::clone(log),
        epoch,
    };
    let controller = manager
        .controller("stamp", &informer, stamp)
        .client(writer)
        .concurrency(NonZeroUsize::new(16).expect("not zero"))
        .build()?;
    manager.add_sharded_controller(controller)?;
    Ok(manager)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let target = Etcd::from_args().await?;
    let duration = etcd::duration_or(Duration::from_secs(14));
    run(&target.endpoint, duration).await
}

async fn run(endpoint: &str, duration: Duration) -> Result<(), BoxError> {
    let mut kv = connect(endpoint).await?;
    seed(&mut kv).await?;
    let epoch = Instant::now();
    let log = Log::default();
    let mut running = Vec::new();
    // A live replica's membership, kept to show a stale token refused.
    let mut witness = None;
    for name in REPLICAS {
        let client = connect(endpoint).await?;
        let member = membership(client.clone(), name)?;
        if name != VICTIM && witness.is_none() {
            witness = Some(member.clone());
        }
        let manager = replica(client, member, &log, epoch).await?;
        running.push(Running::start(name, manager));
    }
    println!("{KEYS} items, {SHARDS} shards, {} replicas", REPLICAS.len());
    let plain = items(kv.clone()).client();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut handover = None;
    while epoch.elapsed() < duration {
        tick.tick().await;
        let owners = owners(&mut kv).await?;
        println!(
            "[{:>5.1}s] shards: {}; stamped by their shard's owner: {}/{KEYS}",
            epoch.elapsed().as_secs_f64(),
            shares(&owners),
            converged(&plain, &owners).await?
        );
        if handover.is_none() && epoch.elapsed() >= duration / 2 {
            handover = Some(kill(&mut kv, &mut running, &log, epoch).await?);
        }
    }
    let handover = match handover {
        Some(handover) => handover,
        None => kill(&mut kv, &mut running, &log, epoch).await?,
    };
    let converged = settle(&mut kv, &plain).await?;
    let witness = witness.expect("a replica besides the victim");
    let refused = stale_write(&kv, &witness, &plain, &handover).await?;
    for replica in running {
        replica.stop().await?;
    }
    let log = log.lock();
    println!("reconciles logged: {}", log.len());
    println!(
        "final: {converged} of {KEYS} keys converged; overlapping reconciles across replicas: {}; \
         stale-token writes refused: {refused} of 1; killed {VICTIM}'s {} shards unowned for {:.1} s",
        overlaps(&log),
        handover.shards,
        handover.unowned.as_secs_f64()
    );
    Ok(())
}
