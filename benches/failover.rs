//! Time from the old leader's resignation to the new leader's first
//! reconcile, with 10k and 100k cached keys: a warm standby (a leader-only controller subscribed,
//! synced and its queue filled before it wins) against a cold one (the
//! controller subscribed once the replica won, as a manager started its
//! controllers before warm standbys). String keys, objects of about 1 KB.
//!
//! `cargo bench --bench failover`; prints one line per size with medians
//! of five runs, and the ratio of cold to warm measured in the same run.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tend::controller::{Action, Context, Controller, Environment, Reconciler};
use tend::election::LeaderElector;
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;
use tend::placement::Leadership;
use tend::{CancellationToken, Informer, Revision};
use tokio::sync::Notify;

const RUNS: usize = 5;

#[derive(Debug, Clone, PartialEq)]
struct Item {
    name: String,
    labels: BTreeMap<String, String>,
    spec: String,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

fn item(i: usize) -> Item {
    let labels = (0..6)
        .map(|l| {
            (
                format!("app.example.com/label-{l}"),
                format!("value-{i}-{l}"),
            )
        })
        .collect();
    Item {
        name: format!("namespace-{}/item-{i:06}", i % 50),
        labels,
        spec: "x".repeat(700),
        version: Revision::ZERO,
    }
}

/// Records when the first reconcile started, and tells.
#[derive(Clone, Default)]
struct First {
    at: Arc<OnceLock<Instant>>,
    told: Arc<Notify>,
}

impl Reconciler<Item> for First {
    type Error = Infallible;

    async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> {
        if self.at.set(Instant::now()).is_ok() {
            self.told.notify_one();
        }
        Ok(Action::Done)
    }
}

async fn seeded(count: usize) -> MemoryStore<Item> {
    let store = MemoryStore::new("items");
    for i in 0..count {
        let _ = store.put(item(i));
    }
    store
}

/// One failover: a rival leads while this replica's informer syncs (and,
/// warm, its controller stands by with every key queued); the rival
/// resigns; returns the time from this replica's win to its first
/// reconcile.
async fn failover(store: &MemoryStore<Item>, count: usize, warm: bool) -> Duration {
    let election = MemoryElectionGroup::new("bench");
    let rival = election.candidate();
    rival.campaign().await.expect("the rival wins");
    let leadership = Leadership::new(election.candidate());
    let informer = Informer::builder(store.clone()).build().expect("valid");
    let stop = CancellationToken::new();
    let watching = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    informer
        .wait_synced(Duration::from_secs(600))
        .await
        .expect("synced");
    let first = First::default();
    let controller = Controller::builder("bench", &informer, first.clone())
        .build()
        .expect("valid");
    let queue = controller.queue();
    let env = Environment::new(stop.clone()).ownership(leadership.ownership());
    let mut term = leadership.term();
    let running = if warm {
        let running = tokio::spawn(controller.run_in(env));
        while queue.stats().ready < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        running
    } else {
        tokio::spawn(async move {
            let _ = term.wait_for(Option::is_some).await;
            controller.run_in(env).await
        })
    };
    let leading = tokio::spawn(leadership.clone().run(stop.clone()));
    let reconciled = first.told.notified();
    tokio::pin!(reconciled);
    reconciled.as_mut().enable();
    // Campaigning: waits until the rival resigns.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let resigned = Instant::now();
    drop(rival);
    reconciled.await;
    let took = first
        .at
        .get()
        .map_or(Duration::ZERO, |at| at.duration_since(resigned));
    stop.cancel();
    running.await.expect("not panicked").expect("clean");
    leading.await.expect("not panicked").expect("clean");
    watching.await.expect("not panicked").expect("clean");
    took
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for count in [10_000, 100_000] {
            let store = seeded(count).await;
            let mut warm = Vec::new();
            let mut cold = Vec::new();
            for _ in 0..RUNS {
                warm.push(failover(&store, count, true).await);
                cold.push(failover(&store, count, false).await);
            }
            let (warm, cold) = (median(warm), median(cold));
            println!(
                "{count} keys: the rival's resignation to the first reconcile: warm {:.1} µs, cold {:.1} µs ({:.0}×)",
                warm.as_secs_f64() * 1e6,
                cold.as_secs_f64() * 1e6,
                cold.as_secs_f64() / warm.as_secs_f64().max(1e-9),
            );
        }
    });
}
