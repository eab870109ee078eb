//! Three replicas sharing the keys of one controller through an etcd
//! membership: each reconciles only the keys of the shards it owns, every
//! write fenced in etcd with the shard's token. One replica is killed
//! mid-run (no leave: its lease must expire) and the others take its
//! shards over.
//!
//! ```sh
//! # starts its own etcd (needs the `etcd` binary: apt-get install -y etcd-server)
//! cargo run --example etcd_sharded --features etcd -- --embedded
//! cargo run --example etcd_sharded --features etcd -- --embedded --duration 30
//! # against a running etcd (its keys under /tend-demo-sharded are replaced)
//! cargo run --example etcd_sharded --features etcd -- --endpoint http://127.0.0.1:2379
//! ```

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::{Client, ClientError, FencingToken};
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{self, DeleteOptions, GetOptions, Txn, TxnOp};
use tend::etcd::{EtcdMembership, EtcdSource};
use tend::manager::{Manager, ManagerError};
use tend::shard::{Membership, ShardCount};
use tend::testing::etcd::{EtcdServer, connect};
use tend::{CancellationToken, Informer, Revision};
use tokio::task::JoinHandle;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    let informer = manager.informer("items", || Informer::builder(source).build())?;
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

/// A replica's manager running as a task.
struct Running {
    name: &'static str,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Running {
    fn start(name: &'static str, manager: Manager) -> Self {
        Self {
            name,
            stop: manager.shutdown_token(),
            task: tokio::spawn(manager.run()),
        }
    }

    /// A clean stop: the replica gives its shards up and leaves.
    async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        Ok(self.task.await??)
    }

    /// As a crash: the task is dropped, nothing is released or revoked.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Replaces the demo's keys by `KEYS` fresh items (batched: etcd allows
/// 128 operations per transaction).
async fn seed(kv: &mut etcd_client::Client) -> Result<(), BoxError> {
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
async fn owners(kv: &mut etcd_client::Client) -> Result<BTreeMap<u32, String>, BoxError> {
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
fn shares(owners: &BTreeMap<u32, String>) -> String {
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
async fn converged(
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

/// Pairs of reconciles of one key, by different replicas, that overlapped
/// in time.
fn overlaps(log: &[Record]) -> usize {
    let mut by_key: HashMap<&str, Vec<&Record>> = HashMap::new();
    for record in log {
        by_key.entry(&record.key).or_default().push(record);
    }
    let mut overlapping = 0;
    for records in by_key.values_mut() {
        records.sort_by_key(|r| r.start);
        for (i, a) in records.iter().enumerate() {
            overlapping += records[i + 1..]
                .iter()
                .take_while(|b| b.start < a.end)
                .filter(|b| b.replica != a.replica)
                .count();
        }
    }
    overlapping
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let server = if args.iter().any(|a| a == "--embedded") {
        Some(EtcdServer::start().await?)
    } else {
        None
    };
    let endpoint = server.as_ref().map_or_else(
        || value("--endpoint").unwrap_or_else(|| "http://127.0.0.1:2379".into()),
        EtcdServer::endpoint,
    );
    let duration = value("--duration")
        .and_then(|d| d.parse().ok())
        .map_or(Duration::from_secs(14), Duration::from_secs);
    run(&endpoint, duration).await
}

/// What the handover of the killed replica's shards took.
struct Handover {
    shards: usize,
    unowned: Duration,
    /// The killed replica's last token, from the log.
    token: Option<FencingToken>,
    key: Option<String>,
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

/// Kills the victim (as a crash) and waits until every shard it owned is
/// owned by another replica.
async fn kill(
    kv: &mut etcd_client::Client,
    running: &mut Vec<Running>,
    log: &Log,
    epoch: Instant,
) -> Result<Handover, BoxError> {
    let index = running
        .iter()
        .position(|r| r.name == VICTIM)
        .expect("the victim runs");
    let before = owners(kv).await?;
    let theirs: Vec<u32> = before
        .iter()
        .filter(|(_, owner)| *owner == VICTIM)
        .map(|(&shard, _)| shard)
        .collect();
    running.remove(index).kill().await;
    let killed = Instant::now();
    let last = log
        .lock()
        .iter()
        .rev()
        .find(|r| r.replica == VICTIM)
        .cloned();
    println!(
        "[{:>5.1}s] KILLED {VICTIM}, owner of {} shards (no leave: its lease must expire)",
        epoch.elapsed().as_secs_f64(),
        theirs.len()
    );
    let deadline = killed + Duration::from_secs(10);
    let after = loop {
        let owners = owners(kv).await?;
        let taken = theirs
            .iter()
            .all(|s| owners.get(s).is_some_and(|o| o != VICTIM));
        if taken || Instant::now() >= deadline {
            break owners;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let unowned = killed.elapsed();
    println!(
        "[{:>5.1}s] {VICTIM}'s shards owned again after {:.2} s; shards: {}",
        epoch.elapsed().as_secs_f64(),
        unowned.as_secs_f64(),
        shares(&after)
    );
    Ok(Handover {
        shards: theirs.len(),
        unowned,
        token: last.as_ref().and_then(|r| r.token),
        key: last.map(|r| r.key),
    })
}

/// Waits (bounded) until every item is stamped by its shard's owner;
/// returns how many are.
async fn settle(kv: &mut etcd_client::Client, items: &Client<Item>) -> Result<usize, BoxError> {
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

/// A write with the killed replica's last token, through a live
/// replica's fenced client: refused, and the item unchanged.
async fn stale_write(
    kv: &etcd_client::Client,
    witness: &EtcdMembership,
    items: &Client<Item>,
    handover: &Handover,
) -> Result<usize, BoxError> {
    let (Some(token), Some(key)) = (handover.token, handover.key.clone()) else {
        println!("no reconcile of {VICTIM} logged: no stale token to try");
        return Ok(0);
    };
    let before = items.get(&key).await?.ok_or("the item exists")?;
    let late = Item {
        by: format!("{VICTIM} (late)"),
        ..before.clone()
    };
    let writer = items_fenced(kv, witness).fenced(token);
    let result = writer.update(late).await;
    let after = items.get(&key).await?.ok_or("the item exists")?;
    let refused = matches!(result, Err(ClientError::Fenced { .. })) && after.by == before.by;
    println!(
        "stale write to {key} with {VICTIM}'s token {token}: {}",
        match &result {
            Err(error) => format!("refused ({error}), item still stamped by {}", after.by),
            Ok(_) => "ACCEPTED".to_owned(),
        }
    );
    Ok(usize::from(refused))
}

fn items_fenced(kv: &etcd_client::Client, member: &EtcdMembership) -> Client<Item> {
    items(kv.clone()).client_fenced_by(member)
}
