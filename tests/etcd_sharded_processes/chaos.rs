//! Disruptions, rounds, and the chaos test with its checks.

use super::*;

/// What a round does to one replica.
#[derive(Debug, Clone, Copy)]
enum Disruption {
    /// SIGKILL: its lease must expire.
    Kill,
    /// SIGTERM: a clean stop; its shards drained and released, handed to
    /// warm replicas at once.
    Stop,
    /// Its membership and informer cut off from etcd (writes still pass)
    /// until it loses the membership and exits.
    Blackhole,
    /// All its traffic held until it exited and its shards were taken:
    /// the writes it had sent then reach etcd late, with stale tokens.
    Partition,
    /// SIGSTOP (a long GC pause) until its shards are owned by others,
    /// then SIGCONT: its reconciles in flight resume with stale tokens.
    Pause,
}

impl Disruption {
    /// Per ten rounds: four kills, two clean stops, a pause, a blackhole
    /// and two partitions.
    fn of_round(round: usize) -> Self {
        match round % 10 {
            1 | 6 => Self::Stop,
            2 => Self::Pause,
            4 => Self::Blackhole,
            7 | 9 => Self::Partition,
            _ => Self::Kill,
        }
    }

    /// Whether the replica's shards wait for its lease (or local deadline).
    fn is_loss(self) -> bool {
        !matches!(self, Self::Stop)
    }
}

/// One round's disruption of `replica`. Returns its death and how long
/// each of its shards stayed unowned.
async fn disrupt(
    kv: &mut etcd_client::Client,
    replica: &mut Replica,
    disruption: Disruption,
) -> (Death, Vec<Duration>) {
    let theirs = shards_of(kv, replica.process.id).await;
    let since = Instant::now();
    let stop = Duration::from_secs(15);
    let (death, took) = match disruption {
        Disruption::Kill => {
            let death = replica.process.kill();
            (death, reowned(kv, replica.process.id, theirs, since).await)
        }
        Disruption::Stop => {
            signal(replica.process.child(), "-TERM");
            let death = replica.process.exited(stop).await;
            (death, reowned(kv, replica.process.id, theirs, since).await)
        }
        Disruption::Blackhole => {
            replica.proxy.blackhole(true);
            let death = replica.process.exited(stop).await;
            (death, reowned(kv, replica.process.id, theirs, since).await)
        }
        Disruption::Partition => {
            replica.proxy.blackhole(true);
            replica.writes.blackhole(true);
            let death = replica.process.exited(stop).await;
            (death, reowned(kv, replica.process.id, theirs, since).await)
        }
        Disruption::Pause => {
            signal(replica.process.child(), "-STOP");
            let took = reowned(kv, replica.process.id, theirs, since).await;
            signal(replica.process.child(), "-CONT");
            let mut death = replica.process.exited(stop).await;
            death.paused = true;
            (death, took)
        }
    };
    replica.proxy.blackhole(false);
    replica.writes.blackhole(false);
    (death, took)
}

async fn start_replicas(etcd: &str, dir: &Path) -> Vec<Replica> {
    let target: std::net::SocketAddr = etcd.trim_start_matches("http://").parse().unwrap();
    let mut replicas = Vec::new();
    for id in IDS {
        let mut replica = Replica {
            proxy: Proxy::start(target).await.unwrap(),
            writes: Proxy::start(target).await.unwrap(),
            process: Process::new(id, dir.to_owned()),
        };
        replica.start();
        replicas.push(replica);
    }
    replicas
}

/// One round: a burst of changes, the victim disrupted under churn and
/// started again, its share back; then, the churn held, every key
/// converged.
async fn round(
    (kv, items): (&mut etcd_client::Client, &Client<Item>),
    replicas: &mut [Replica],
    (round, rng): (usize, &mut u64),
    (gate, rounds): (&tokio::sync::Mutex<()>, &mut Rounds),
) {
    bump(kv, rng, BUMPS, KEYS).await;
    // Not a wait for anything: the disruption should find the burst's
    // reconciles in flight.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let victim = usize::try_from(*rng % 3).unwrap();
    let disruption = Disruption::of_round(round);
    let (death, took) = disrupt(kv, &mut replicas[victim], disruption).await;
    rounds.deaths.push(death);
    if disruption.is_loss() {
        rounds.unowned.extend(took);
    } else {
        rounds.handed.extend(took);
    }
    replicas[victim].start();
    owns_its_share(kv, IDS[victim], &IDS).await;
    let _held = gate.lock().await;
    let what = format!("round {round} ({disruption:?} {})", IDS[victim]);
    let settled = converge(kv, items, &what).await;
    eprintln!("{what}: converged {settled:?} after its share was back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_processes_survive_kills_and_blackholes_without_overlap_or_stale_writes() {
    let rounds: usize = std::env::var("TEND_CHAOS_ROUNDS").map_or(50, |r| r.parse().unwrap());
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let seeded = seed(&mut kv, KEYS).await;
    let history = History::follow(kv.clone(), "/chaos/", seeded + 1, shards());
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = start_replicas(&etcd.endpoint(), dir.path()).await;
    let items = items(kv.clone()).client();
    let first = converge(&mut kv, &items, "the first sync").await;
    eprintln!("all {KEYS} keys converged {first:?} after the start");
    let mut rng: u64 = 0x5eed_cafe;
    let (gate, churning) = churn(kv.clone(), rng ^ 0xc4a5, CHURN, KEYS);
    let mut measured = Rounds::default();
    for n in 0..rounds {
        round(
            (&mut kv, &items),
            &mut replicas,
            (n, &mut rng),
            (&gate, &mut measured),
        )
        .await;
    }
    churning.abort();
    measured
        .deaths
        .extend(replicas.iter_mut().map(|r| r.process.kill()));
    let end = revision_now(&mut kv).await;
    let history = history.until(end).await;
    let reconciles = parse_logs(dir.path(), &measured.deaths);
    // Lease + 1 s: the lease expires, and the others' next acquisition
    // follows within the renewal interval.
    check(
        rounds,
        &reconciles,
        &history,
        measured,
        timing().lease() + Duration::from_secs(1),
    );
}
