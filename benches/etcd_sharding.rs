//! The throughput of sharding on etcd: an I/O-bound reconciler (each
//! reconcile waits 5 ms), 10,000 keys, the same concurrency per replica;
//! the time until every key is reconciled once with 1, 2 and 3 sharded
//! replicas (`EtcdMembership`) against one etcd, and with 1 replica under
//! plain leader election (`EtcdElection`) for the cost of sharding itself.
//!
//! A benchmark with a plain `main` (`harness = false`): each figure is one
//! long measurement against a real server, all in one run.
//!
//! ```sh
//! cargo bench --features etcd --bench etcd_sharding
//! cargo bench --features etcd --bench etcd_sharding -- --keys 20000 --workers 32 --shards 256
//! ```

use std::collections::HashSet;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::controller::{Action, Context, Reconciler};
use tend::etcd::etcd_client::{self, Txn, TxnOp};
use tend::etcd::{EtcdElection, EtcdMembership, EtcdSource};
use tend::manager::{ElectionConfig, Manager};
use tend::shard::ShardCount;
use tend::testing::etcd::EtcdServer;
use tend::{Informer, Revision};
use tokio::sync::Notify;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ITEMS: &str = "/bench/items/";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    name: String,
    #[serde(skip)]
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// The settings of one run.
#[derive(Debug, Clone, Copy)]
struct Settings {
    keys: usize,
    workers: NonZeroUsize,
    shards: ShardCount,
}

/// The keys reconciled at least once; `done` is woken when all are.
struct Seen {
    keys: Mutex<HashSet<String>>,
    want: usize,
    done: Notify,
}

/// Waits 5 ms (an I/O-bound reconcile), then counts the key.
struct Wait(Arc<Seen>);

impl Reconciler<Item> for Wait {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Infallible> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut keys = self.0.keys.lock();
        if keys.insert(ctx.key().clone()) && keys.len() == self.0.want {
            self.0.done.notify_one();
        }
        Ok(Action::Done)
    }
}

/// Lease 2 s, renew deadline 1.5 s, retry period 0.5 s (both kinds).
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .expect("valid timing")
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: usize| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(default)
    };
    let settings = Settings {
        keys: value("--keys", 10_000),
        workers: NonZeroUsize::new(value("--workers", 16)).ok_or("--workers 0")?,
        shards: ShardCount::new(u32::try_from(value("--shards", 256))?)?,
    };
    let server = EtcdServer::start().await?;
    seed(&mut server.client().await?, settings.keys).await?;
    println!(
        "{} keys, 5 ms per reconcile, {} workers per replica, {} shards",
        settings.keys,
        settings.workers,
        settings.shards.get()
    );
    let elected = run(&server, settings, None).await?;
    println!("1 replica, leader election: {elected:.2?}");
    let mut sharded = Vec::new();
    for replicas in 1..=3 {
        let took = run(&server, settings, Some(replicas)).await?;
        println!("{replicas} sharded replica(s): {took:.2?}");
        sharded.push(took);
    }
    let one = sharded[0].as_secs_f64();
    println!(
        "speed-up: {:.2}x at 2 replicas, {:.2}x at 3; 1 sharded replica against leader election: {:+.1} %",
        one / sharded[1].as_secs_f64(),
        one / sharded[2].as_secs_f64(),
        (one / elected.as_secs_f64() - 1.0) * 100.0
    );
    Ok(())
}

/// `keys` items (batched: etcd allows 128 operations per transaction).
async fn seed(kv: &mut etcd_client::Client, keys: usize) -> Result<(), BoxError> {
    let names: Vec<String> = (0..keys).map(|i| format!("item-{i:06}")).collect();
    for chunk in names.chunks(128) {
        let mut ops = Vec::with_capacity(chunk.len());
        for name in chunk {
            let item = Item {
                name: name.clone(),
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

/// The time from the managers' start until every key was reconciled once:
/// `Some(n)` sharded replicas (a fresh group each run), or `None` for one
/// replica under leader election.
async fn run(
    server: &EtcdServer,
    settings: Settings,
    replicas: Option<usize>,
) -> Result<Duration, BoxError> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seen = Arc::new(Seen {
        keys: Mutex::new(HashSet::new()),
        want: settings.keys,
        done: Notify::new(),
    });
    let group = format!("bench-{run}");
    let mut managers = Vec::new();
    for replica in 0..replicas.unwrap_or(1) {
        let client = server.client().await?;
        let id = format!("replica-{replica}");
        let sharded = replicas.is_some();
        managers.push(replica_of(client, settings, &seen, &group, &id, sharded)?);
    }
    let start = Instant::now();
    let mut running = Vec::new();
    for manager in managers {
        running.push((manager.shutdown_token(), tokio::spawn(manager.run())));
    }
    if tokio::time::timeout(Duration::from_secs(60), seen.done.notified())
        .await
        .is_err()
    {
        let reconciled = seen.keys.lock().len();
        return Err(format!("{reconciled} of {} keys reconciled within 60 s", seen.want).into());
    }
    let took = start.elapsed();
    for (stop, task) in running {
        stop.cancel();
        task.await??;
    }
    Ok(took)
}

/// One replica: sharded on a membership of `group`, or a candidate of the
/// election `group`; one controller over every item.
fn replica_of(
    client: etcd_client::Client,
    settings: Settings,
    seen: &Arc<Seen>,
    group: &str,
    id: &str,
    sharded: bool,
) -> Result<Manager, BoxError> {
    let builder = Manager::builder().without_signals();
    let builder = if sharded {
        let member = EtcdMembership::builder(client.clone(), group, id, settings.shards)
            .config(timing())
            .build()?;
        builder.sharding(member, settings.shards)
    } else {
        let election = EtcdElection::builder(client.clone(), group)
            .identity(id.to_owned())
            .config(timing())
            .build()?;
        builder.leader_election(election)
    };
    let mut manager = builder.build()?;
    let source = EtcdSource::<Item>::builder("items", client, ITEMS).build();
    let informer = manager.informer("items", || Informer::builder(source).build())?;
    let controller = manager
        .controller("wait", &informer, Wait(Arc::clone(seen)))
        .concurrency(settings.workers)
        .build()?;
    if sharded {
        manager.add_sharded_controller(controller)?;
    } else {
        manager.add_controller(controller)?;
    }
    Ok(manager)
}
