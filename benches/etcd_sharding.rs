//! The throughput of sharding on etcd: an I/O-bound reconciler (each
//! reconcile waits 5 ms), 10,000 keys, the same concurrency per replica,
//! with 1, 2 and 3 sharded replicas (`EtcdMembership`) against one etcd,
//! and with 1 replica under plain leader election (`EtcdElection`) for the
//! cost of sharding itself. Two figures per run: the time from the
//! managers' start until every key was reconciled once (informer sync,
//! join and acquisitions included: a fixed cost), and the throughput once
//! every replica owns its share: the time of one pass over every key,
//! started on every replica at once by `reconcile_all_on`.
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

use futures::channel::mpsc::UnboundedReceiver;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{self, Txn, TxnOp};
use tend::etcd::{EtcdElection, EtcdMembership, EtcdSource};
use tend::manager::Manager;
use tend::shard::{Assignment, Membership, ShardCount};
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

/// The keys reconciled at least once in this pass; `done` is woken when
/// all are.
struct Seen {
    keys: Mutex<HashSet<String>>,
    want: usize,
    done: Notify,
}

impl Seen {
    /// Waits (60 s at most) until every key was reconciled in this pass.
    async fn all(&self) -> Result<(), BoxError> {
        let done = self.done.notified();
        if self.keys.lock().len() == self.want {
            return Ok(());
        }
        if tokio::time::timeout(Duration::from_secs(60), done)
            .await
            .is_err()
        {
            let reconciled = self.keys.lock().len();
            return Err(
                format!("{reconciled} of {} keys reconciled within 60 s", self.want).into(),
            );
        }
        Ok(())
    }
}

/// One run's figures.
struct Figures {
    /// From the managers' start until every key was reconciled once.
    startup: Duration,
    /// One pass over every key once every replica owns its share.
    pass: Duration,
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
    report("1 replica, leader election", &elected);
    let mut sharded = Vec::new();
    for replicas in 1..=3 {
        let figures = run(&server, settings, Some(replicas)).await?;
        report(&format!("{replicas} sharded replica(s)"), &figures);
        sharded.push(figures);
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "throughput (one pass) speed-up: {:.2}x at 2 replicas, {:.2}x at 3; \
         startup to every key once: {:.2}x, {:.2}x; \
         1 sharded replica against leader election: pass {:+.1} %, startup {:+.1} %",
        ratio(sharded[0].pass, sharded[1].pass),
        ratio(sharded[0].pass, sharded[2].pass),
        ratio(sharded[0].startup, sharded[1].startup),
        ratio(sharded[0].startup, sharded[2].startup),
        (ratio(sharded[0].pass, elected.pass) - 1.0) * 100.0,
        (ratio(sharded[0].startup, elected.startup) - 1.0) * 100.0,
    );
    Ok(())
}

fn report(what: &str, figures: &Figures) {
    println!(
        "{what}: startup to every key once {:.2?}, one pass {:.2?}",
        figures.startup, figures.pass
    );
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

/// One run's figures: `Some(n)` sharded replicas (a fresh group each
/// run), or `None` for one replica under leader election.
async fn run(
    server: &EtcdServer,
    settings: Settings,
    replicas: Option<usize>,
) -> Result<Figures, BoxError> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seen = Arc::new(Seen {
        keys: Mutex::new(HashSet::new()),
        want: settings.keys,
        done: Notify::new(),
    });
    let group = format!("bench-{run}");
    let (mut managers, mut members, mut passes) = (Vec::new(), Vec::new(), Vec::new());
    for replica in 0..replicas.unwrap_or(1) {
        let client = server.client().await?;
        let id = format!("replica-{replica}");
        let (pass, signals) = futures::channel::mpsc::unbounded();
        passes.push(pass);
        let built = replica_of(
            client,
            settings,
            (&seen, signals),
            &group,
            (&id, replicas.is_some()),
        )?;
        managers.push(built.0);
        members.extend(built.1);
    }
    let start = Instant::now();
    let mut running = Vec::new();
    for manager in managers {
        running.push((manager.shutdown_token(), tokio::spawn(manager.run())));
    }
    seen.all().await?;
    let startup = start.elapsed();
    settled(&members, settings.shards).await?;
    shares(&members, settings);
    seen.keys.lock().clear();
    let start = Instant::now();
    for pass in &passes {
        pass.unbounded_send(())?;
    }
    seen.all().await?;
    let pass = start.elapsed();
    for (stop, task) in running {
        stop.cancel();
        task.await??;
    }
    Ok(Figures { startup, pass })
}

/// Prints each member's shards and keys: the largest share bounds the
/// speed-up.
fn shares(members: &[EtcdMembership], settings: Settings) {
    if members.len() < 2 {
        return;
    }
    let mut keys = vec![0usize; members.len()];
    for i in 0..settings.keys {
        let shard = settings.shards.shard_of(&format!("item-{i:06}"));
        if let Some(owner) = members
            .iter()
            .position(|m| m.owned().iter().any(|(s, _)| *s == shard))
        {
            keys[owner] += 1;
        }
    }
    let parts: Vec<String> = members
        .iter()
        .zip(&keys)
        .map(|(m, k)| format!("{} {} shards, {k} keys", m.id(), m.owned().len()))
        .collect();
    let largest = keys.iter().max().copied().unwrap_or(0);
    println!(
        "  shares: {}; ideal speed-up for the largest share: {:.2}x",
        parts.join("; "),
        settings.keys as f64 / largest as f64
    );
}

/// Waits until every member owns exactly its share, then a little longer
/// for the last gained shards' keys to be reconciled.
async fn settled(members: &[EtcdMembership], shards: ShardCount) -> Result<(), BoxError> {
    let ids: Vec<String> = members.iter().map(|m| m.id().to_string()).collect();
    let assignment = Assignment::compute(ids.iter().map(String::as_str), shards);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !members
        .iter()
        .all(|m| m.owned().len() == assignment.shards_of(m.id().as_str()).count())
    {
        if Instant::now() >= deadline {
            return Err("the replicas did not settle on their shares within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(())
}

/// One replica: sharded on a membership of `group` (returned too, to
/// see its shares), or a candidate of the election `group`; one controller
/// over every item, which passes over every key on each signal.
fn replica_of(
    client: etcd_client::Client,
    settings: Settings,
    (seen, signals): (&Arc<Seen>, UnboundedReceiver<()>),
    group: &str,
    (id, sharded): (&str, bool),
) -> Result<(Manager, Option<EtcdMembership>), BoxError> {
    let builder = Manager::builder().without_signals();
    let (builder, member) = if sharded {
        let member = EtcdMembership::builder(client.clone(), group, id, settings.shards)
            .config(timing())
            .build()?;
        (
            builder.sharding(member.clone(), settings.shards),
            Some(member),
        )
    } else {
        let election = EtcdElection::builder(client.clone(), group)
            .identity(id.to_owned())
            .config(timing())
            .build()?;
        (builder.leader_election(election), None)
    };
    let mut manager = builder.build()?;
    let source = EtcdSource::<Item>::builder("items", client, ITEMS).build();
    let informer = manager.informer("items", || Informer::builder(source).build())?;
    let controller = manager
        .controller("wait", &informer, Wait(Arc::clone(seen)))
        .concurrency(settings.workers)
        .reconcile_all_on(signals)
        .build()?;
    if sharded {
        manager.add_sharded_controller(controller)?;
    } else {
        manager.add_controller(controller)?;
    }
    Ok((manager, member))
}
