//! Figures of the etcd backend against a local etcd it starts itself:
//! list + sync of 100,000 objects, watch latency from put to reconcile
//! start, and leader failover time over 20 rounds.
//!
//! A benchmark with a plain `main` (`harness = false`), not divan: each
//! figure is one long measurement against a real server.
//!
//! ```sh
//! cargo bench --features etcd --bench etcd_figures
//! cargo bench --features etcd --bench etcd_figures -- --objects 20000 --rounds 5
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::election::{ElectionConfig, LeaderElector};
use tend::etcd::etcd_client::{Txn, TxnOp};
use tend::etcd::{EtcdElection, EtcdSource};
use tend::testing::etcd::EtcdServer;
use tend::{Informer, Revision};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    name: String,
    value: u64,
    #[serde(skip)]
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: usize| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(default)
    };
    let server = EtcdServer::builder()
        .arg("--quota-backend-bytes=4294967296")
        .start()
        .await?;
    list_and_sync(&server, value("--objects", 100_000)).await?;
    watch_latency(&server, value("--puts", 500)).await?;
    failover(&server, value("--rounds", 20)).await?;
    Ok(())
}

async fn list_and_sync(server: &EtcdServer, objects: usize) -> Result<(), BoxError> {
    let mut client = server.client().await?;
    let seeding = Instant::now();
    let names: Vec<String> = (0..objects).map(|i| format!("item-{i:06}")).collect();
    // etcd's default limit is 128 operations per transaction.
    for chunk in names.chunks(128) {
        let ops: Vec<_> = chunk
            .iter()
            .map(|name| {
                let item = Item {
                    name: name.clone(),
                    value: 1,
                    version: Revision::ZERO,
                };
                TxnOp::put(
                    format!("/figures/items/{name}"),
                    serde_json::to_vec(&item).unwrap(),
                    None,
                )
            })
            .collect();
        client.txn(Txn::new().and_then(ops)).await?;
    }
    println!(
        "seeded {objects} objects in {:.2?} (batched txns of 128)",
        seeding.elapsed()
    );
    let source = EtcdSource::<Item>::builder("items", client, "/figures/items/").build();
    let informer = Informer::builder(source).build()?;
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let run = tokio::spawn({
        let (informer, cancel) = (informer.clone(), cancel.clone());
        async move { informer.run(cancel).await }
    });
    informer.wait_synced(Duration::from_secs(300)).await?;
    let took = started.elapsed();
    println!(
        "list + sync of {} objects: {took:.2?}, {:.0} objects/s",
        informer.cache().len(),
        informer.cache().len() as f64 / took.as_secs_f64()
    );
    cancel.cancel();
    run.await??;
    Ok(())
}

/// Records when each key's reconcile started.
struct Stamp(Arc<Mutex<HashMap<String, Instant>>>);

impl Reconciler<Item> for Stamp {
    type Error = Infallible;
    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Infallible> {
        self.0
            .lock()
            .entry(ctx.key().clone())
            .or_insert_with(Instant::now);
        Ok(Action::Done)
    }
}

async fn watch_latency(server: &EtcdServer, puts: usize) -> Result<(), BoxError> {
    let mut client = server.client().await?;
    let source =
        EtcdSource::<Item>::builder("latency", client.clone(), "/figures/latency/").build();
    let informer = Informer::builder(source).build()?;
    let started = Arc::new(Mutex::new(HashMap::new()));
    let controller =
        Controller::builder("latency", &informer, Stamp(Arc::clone(&started))).build()?;
    let cancel = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (informer, cancel) = (informer.clone(), cancel.clone());
        tasks.spawn(async move { informer.run(cancel).await.map_err(BoxError::from) });
    }
    {
        let cancel = cancel.clone();
        tasks.spawn(async move { controller.run(cancel).await.map_err(BoxError::from) });
    }
    informer.wait_synced(Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut put_at = HashMap::new();
    for i in 0..puts {
        let name = format!("k-{i:05}");
        let item = Item {
            name: name.clone(),
            value: 1,
            version: Revision::ZERO,
        };
        put_at.insert(name.clone(), Instant::now());
        client
            .put(
                format!("/figures/latency/{name}"),
                serde_json::to_vec(&item)?,
                None,
            )
            .await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        while started.lock().len() < puts {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    let latencies = put_to_start(&put_at, &started.lock());
    println!(
        "watch latency put → reconcile start over {puts} puts: p50 {:.2?}, p99 {:.2?}",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    cancel.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Each key's delay from its put to its first reconcile, sorted.
fn put_to_start(
    put_at: &HashMap<String, Instant>,
    started: &HashMap<String, Instant>,
) -> Vec<Duration> {
    let mut latencies: Vec<Duration> = put_at
        .iter()
        .filter_map(|(name, at)| Some(started.get(name)?.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    latencies
}

async fn failover(server: &EtcdServer, rounds: usize) -> Result<(), BoxError> {
    let config = ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )?;
    let candidate = |client| {
        EtcdElection::builder(client, "figures")
            .config(config)
            .build()
    };
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(candidate(server.client().await?)?);
    }
    let mut times = Vec::new();
    for round in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for replica in &replicas {
            let replica = replica.clone();
            tasks.spawn(async move { replica.campaign().await });
        }
        while !replicas.iter().any(EtcdElection::is_leader) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let index = replicas
            .iter()
            .position(EtcdElection::is_leader)
            .unwrap_or(0);
        // Kill the leader without resigning: its lease must expire.
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        drop(replicas.remove(index));
        let killed = Instant::now();
        replicas.push(candidate(server.client().await?)?);
        for replica in &replicas {
            let replica = replica.clone();
            tasks.spawn(async move { replica.campaign().await });
        }
        while !replicas.iter().any(EtcdElection::is_leader) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        times.push(killed.elapsed());
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        eprintln!("round {round}: {:.2?}", killed.elapsed());
    }
    times.sort();
    println!(
        "failover after a leader kill (lease {:?}) over {rounds} rounds: p50 {:.2?}, p99 {:.2?}",
        config.lease(),
        percentile(&times, 0.50),
        percentile(&times, 0.99)
    );
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
