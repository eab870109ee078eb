//! The rounds and the checks.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tend::testing::kube::ControlPlane;
use tokio::time::Instant;

use super::chaos_log::{Death, overlaps, parse_logs};
use super::chaos_process::{percentile, signal};
use super::wait::within;
use super::world::{Replica, bump, converge, owned_by_all, reowned, seed, shards_of};
use super::{SHARDS, timing};

const KEYS: usize = 1_000;
const IDS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
/// Maps whose desired state changes just before each disruption.
const BUMPS: usize = 40;

/// What a round does to one replica.
#[derive(Debug, Clone, Copy)]
enum Disruption {
    /// SIGKILL: its Lease must expire.
    Kill,
    /// SIGTERM: a clean stop; its shards released at once.
    Stop,
    /// Cut off from the API server until it lost its membership and
    /// exited.
    Blackhole,
    /// SIGSTOP until its shards are owned by others, then SIGCONT: it
    /// resumes past its local deadline.
    Pause,
}

/// One disruption of `replica`: its death and how long each of its shards
/// stayed unowned.
async fn disrupt(
    leases: &Api<Lease>,
    replica: &mut Replica,
    disruption: Disruption,
) -> (Death, Vec<Duration>) {
    let id = replica.process.id;
    let theirs = shards_of(leases, id).await;
    let since = Instant::now();
    let stop = Duration::from_secs(15);
    let (death, took) = match disruption {
        Disruption::Kill => {
            let death = replica.process.kill();
            (death, reowned(leases, id, theirs, since).await)
        }
        Disruption::Stop => {
            signal(replica.process.child(), "-TERM");
            let took = reowned(leases, id, theirs, since).await;
            (replica.process.exited(stop).await, took)
        }
        Disruption::Blackhole => {
            replica.proxy.blackhole(true);
            let took = reowned(leases, id, theirs, since).await;
            (replica.process.exited(stop).await, took)
        }
        Disruption::Pause => {
            signal(replica.process.child(), "-STOP");
            let took = reowned(leases, id, theirs, since).await;
            signal(replica.process.child(), "-CONT");
            let mut death = replica.process.exited(stop).await;
            death.paused = true;
            (death, took)
        }
    };
    replica.proxy.blackhole(false);
    (death, took)
}

/// A fresh namespace of seeded maps, the replicas started, every shard
/// owned and every map converged: the maps, the Leases, the replicas and
/// the directory of their logs.
async fn start() -> (Api<ConfigMap>, Api<Lease>, Vec<Replica>, tempfile::TempDir) {
    let plane = within(
        "the control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .expect("a control plane");
    let client = plane.client().await.expect("a client");
    let ns = plane
        .create_namespace(&client, "chaos")
        .await
        .expect("a namespace");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    seed(&maps, &ns, KEYS).await;
    let logs = tempfile::tempdir().expect("a directory for the logs");
    let url = plane.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    let apiserver = format!("127.0.0.1:{port}").parse().unwrap();
    let mut replicas = Vec::new();
    for id in IDS {
        let mut replica =
            Replica::new(id, logs.path(), apiserver, plane.kubeconfig_path(), &ns).await;
        replica.start();
        replicas.push(replica);
    }
    owned_by_all(&leases, &IDS, SHARDS).await;
    converge(&maps, "the start").await;
    (maps, leases, replicas, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_processes_on_the_api_server_survive_kills_stops_blackholes_and_pauses() {
    let rounds: usize = std::env::var("TEND_KUBE_CHAOS_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8);
    let (maps, leases, mut replicas, logs) = start().await;
    let (mut deaths, mut unowned, mut handed) = (Vec::new(), Vec::new(), Vec::new());
    let mut rng = 0x5eed_u64;
    for round in 0..rounds {
        let disruption = [
            Disruption::Kill,
            Disruption::Stop,
            Disruption::Blackhole,
            Disruption::Pause,
        ][round % 4];
        let victim = round % IDS.len();
        bump(&maps, &mut rng, BUMPS, KEYS, round + 1).await;
        let (death, took) = disrupt(&leases, &mut replicas[victim], disruption).await;
        deaths.push(death);
        match disruption {
            Disruption::Stop => handed.extend(took),
            _ => unowned.extend(took),
        }
        // A second burst, in flight when the restarted replica takes its
        // share back from the others.
        bump(&maps, &mut rng, BUMPS, KEYS, round + 1_000).await;
        replicas[victim].start();
        converge(&maps, &format!("round {round} ({disruption:?})")).await;
        owned_by_all(&leases, &IDS, SHARDS).await;
    }
    for replica in &mut replicas {
        deaths.push(replica.process.kill());
    }
    report(
        rounds,
        &parse_logs(logs.path(), &deaths),
        &deaths,
        unowned,
        handed,
    );
}

/// Prints the run's figures and asserts its claims.
fn report(
    rounds: usize,
    reconciles: &[super::chaos_log::Reconcile],
    deaths: &[Death],
    mut unowned: Vec<Duration>,
    mut handed: Vec<Duration>,
) {
    let (overlapping, paused) = overlaps(reconciles, deaths);
    unowned.sort();
    handed.sort();
    let fenced = reconciles.iter().filter(|r| r.outcome == "fenced").count();
    eprintln!(
        "{rounds} rounds: {} reconciles logged, {overlapping} overlapping across processes \
         (besides {paused} spanning a pause, none writing after the other began); {fenced} writes refused as fenced; \
         shards unowned after a kill, blackhole or pause: p50 {:?}, p99 {:?}, max {:?} ({}); \
         after a clean stop: p50 {:?}, p99 {:?} ({})",
        reconciles.len(),
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
        "reconciles of one map overlapped across processes"
    );
    let bound = timing().lease() + Duration::from_millis(1500);
    assert!(
        percentile(&unowned, 0.99) <= bound,
        "a lost replica's shards stayed unowned longer than {bound:?} (p99)"
    );
}
