//! Three sharded replicas as separate processes on one real etcd, through
//! rounds of SIGKILL and of blackholing one replica from etcd: no key is
//! reconciled by two processes at once (from their logs), etcd accepts no
//! write with a stale shard token (from etcd's own history), every key
//! converges after each round, and a lost replica's shards are owned again
//! within the lease + 1 s (p50/p99 printed).
//!
//! The replicas are this test binary run again with `chaos_replica` as its
//! only test (an ignored test that does nothing unless the parent set its
//! environment). Each reaches etcd twice: its membership and informer
//! through a [`Proxy`] the parent can blackhole, its fenced writes directly,
//! so a replica cut off from etcd still tries to write (and must be
//! refused). `TEND_CHAOS_ROUNDS` sets the rounds (default 50).

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

#[path = "support/chaos_history.rs"]
mod chaos_history;

#[path = "support/chaos_log.rs"]
mod chaos_log;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Reconciler};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{self, GetOptions, Txn, TxnOp};
use tend::etcd::{EtcdMembership, EtcdSource};
use tend::manager::Manager;
use tend::shard::{Assignment, ShardCount};
use tend::testing::Proxy;
use tend::testing::etcd::connect;
use tend::{Informer, Revision};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use chaos_history::{History, Summary};
use chaos_log::{Death, Reconcile, overlaps, parse_logs};
use support::{client, server};

const GROUP: &str = "chaos";
const GROUP_PREFIX: &str = "/chaos/group";
const SHARD_RECORDS: &str = "/chaos/group/shards/";
const ITEMS: &str = "/chaos/items/";
const KEYS: usize = 10_000;
const SHARDS: u32 = 64;
const IDS: [&str; 3] = ["replica-1", "replica-2", "replica-3"];
/// Items whose desired state changes just before each disruption (in one
/// transaction).
const BUMPS: usize = 120;
/// Items changed every 20 ms meanwhile, until the round converges.
const CHURN: usize = 10;

/// An item: `want` is set by the test, the rest by the replica that
/// reconciled it last (`token` 0 after the test's own writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    name: String,
    want: u64,
    seen: u64,
    by: String,
    token: u64,
    #[serde(skip)]
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// Lease 2 s (etcd's minimum), local deadline 1.5 s after a renewal,
/// renewed every 0.5 s.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn shards() -> ShardCount {
    ShardCount::new(SHARDS).unwrap()
}

fn items(client: etcd_client::Client) -> EtcdSource<Item> {
    EtcdSource::builder("items", client, ITEMS).build()
}

fn wall_ns() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_nanos()).unwrap()
}

// ---- the replica process ----

/// A replica's log: a line when a reconcile starts and one when it ends
/// (also when it is cancelled: the guard's drop), wall-clock nanoseconds.
struct Log(Mutex<std::fs::File>);

impl Log {
    fn line(&self, line: &str) {
        let mut file = self.0.lock();
        file.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// Logs a reconcile's end when dropped: at its end, or when cancelled.
struct Span<'a> {
    log: &'a Log,
    key: String,
    token: u64,
    outcome: &'static str,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        let (key, token, outcome) = (&self.key, self.token, self.outcome);
        self.log
            .line(&format!("E {key} {token} {} {outcome}", wall_ns()));
    }
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

/// One replica: the membership and the informer through `cut` (the
/// parent's proxy), the fenced writes direct.
async fn replica(id: &str, cut: &str, direct: &str, log: &Path) -> Result<(), String> {
    let cut = connect(cut).await.map_err(|e| e.to_string())?;
    let direct = connect(direct).await.map_err(|e| e.to_string())?;
    let member = EtcdMembership::builder(cut.clone(), GROUP, id, shards())
        .prefix(GROUP_PREFIX)
        .config(timing())
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

/// The replica process's entry point (see the module docs).
#[test]
#[ignore = "a replica process of the chaos test, started by it"]
fn chaos_replica() {
    let Ok(id) = std::env::var("TEND_CHAOS_REPLICA") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let (cut, direct, log) = (
        var("TEND_CHAOS_CUT"),
        var("TEND_CHAOS_ETCD"),
        var("TEND_CHAOS_LOG"),
    );
    // The parent holds this process's stdin: its end (or the parent's
    // death) ends the replica.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = match runtime.block_on(replica(&id, &cut, &direct, log.as_ref())) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{id} stopped: {error}");
            2
        }
    };
    std::process::exit(code);
}

// ---- the parent ----

/// A replica as the parent sees it: its proxies, its process, its lives.
struct Replica {
    id: &'static str,
    /// Its membership's and informer's way to etcd.
    proxy: Proxy,
    /// Its writes' way to etcd.
    writes: Proxy,
    child: Option<Child>,
    lives: u32,
    dir: PathBuf,
}

impl Replica {
    fn log_path(&self, life: u32) -> PathBuf {
        self.dir.join(format!("{}.{life}.log", self.id))
    }

    fn start(&mut self) {
        self.lives += 1;
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["chaos_replica", "--exact", "--ignored", "--nocapture"])
            .env("TEND_CHAOS_REPLICA", self.id)
            .env("TEND_CHAOS_CUT", self.proxy.endpoint())
            .env("TEND_CHAOS_ETCD", self.writes.endpoint())
            .env("TEND_CHAOS_LOG", self.log_path(self.lives))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the replica process starts");
        self.child = Some(child);
    }

    /// SIGKILL; returns when the process is gone.
    fn kill(&mut self) -> Death {
        let mut child = self.child.take().expect("the replica runs");
        child.kill().unwrap();
        child.wait().unwrap();
        self.death()
    }

    /// Waits (bounded) for the process to exit on its own.
    async fn exited(&mut self, limit: Duration) -> Death {
        let started = Instant::now();
        let child = self.child.as_mut().expect("the replica runs");
        while child.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < limit,
                "{} did not stop within {limit:?} of losing its membership",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.child = None;
        self.death()
    }

    fn death(&self) -> Death {
        Death {
            log: self.log_path(self.lives),
            at: wall_ns(),
            paused: false,
        }
    }
}

/// Each shard's owner and token (the record's create revision), from etcd.
async fn owners(kv: &mut etcd_client::Client) -> BTreeMap<u32, (String, u64)> {
    let options = GetOptions::new().with_prefix();
    let records = kv.get(SHARD_RECORDS, Some(options)).await.unwrap();
    records
        .kvs()
        .iter()
        .map(|kv| {
            let index = kv.key_str().unwrap().trim_start_matches(SHARD_RECORDS);
            let token = u64::try_from(kv.create_revision()).unwrap();
            (
                index.parse().unwrap(),
                (kv.value_str().unwrap().to_owned(), token),
            )
        })
        .collect()
}

/// Writes the items; returns the revision after the last.
async fn seed(kv: &mut etcd_client::Client) -> i64 {
    let mut revision = 0;
    let names: Vec<String> = (0..KEYS).map(|i| format!("item-{i:05}")).collect();
    for chunk in names.chunks(128) {
        let ops = chunk
            .iter()
            .map(|name| {
                let item = Item {
                    name: name.clone(),
                    want: 1,
                    seen: 0,
                    by: String::new(),
                    token: 0,
                    version: Revision::ZERO,
                };
                let value = serde_json::to_vec(&item).unwrap();
                TxnOp::put(format!("{ITEMS}{name}"), value, None)
            })
            .collect::<Vec<_>>();
        let done = kv.txn(Txn::new().and_then(ops)).await.unwrap();
        revision = done.header().unwrap().revision();
    }
    revision
}

/// Items not stamped by their shard's owner with its token and the
/// wanted value.
async fn unconverged(kv: &mut etcd_client::Client, items: &Client<Item>) -> (usize, usize) {
    let owners = owners(kv).await;
    let snapshot = items.list().await.unwrap();
    let bad = snapshot
        .objects
        .iter()
        .filter(|item| {
            let shard = shards().shard_of(&item.name).index();
            let owner = owners.get(&shard);
            item.seen != item.want
                || owner.is_none_or(|(id, token)| *id != item.by || *token != item.token)
        })
        .count();
    (bad, SHARDS as usize - owners.len())
}

/// Waits (bounded) until every key is converged.
async fn converge(kv: &mut etcd_client::Client, items: &Client<Item>, what: &str) -> Duration {
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let (bad, unowned) = unconverged(kv, items).await;
        if bad == 0 && unowned == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {bad} of {KEYS} keys not converged and {unowned} shards unowned after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Changes the wanted value of `count` random items at once, in one
/// transaction (an unfenced write, token 0; a replica's stamp landing
/// meanwhile is overwritten, and restamped: the item is reconciled again).
async fn bump(kv: &mut etcd_client::Client, rng: &mut u64, count: usize) {
    let mut picked = std::collections::BTreeSet::new();
    while picked.len() < count {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        picked.insert(*rng % KEYS as u64);
    }
    let mut ops = Vec::with_capacity(count);
    for index in picked {
        let key = format!("{ITEMS}item-{index:05}");
        let found = kv.get(key.as_str(), None).await.unwrap();
        let value = found.kvs().first().expect("the item exists").value();
        let mut item: Item = serde_json::from_slice(value).unwrap();
        item.want += 1;
        item.token = 0;
        ops.push(TxnOp::put(key, serde_json::to_vec(&item).unwrap(), None));
    }
    kv.txn(Txn::new().and_then(ops)).await.unwrap();
}

/// Waits until none of `theirs` is owned by `id`; returns how long each
/// took from `since`.
async fn reowned(
    kv: &mut etcd_client::Client,
    id: &str,
    mut theirs: Vec<u32>,
    since: Instant,
) -> Vec<Duration> {
    let limit = Duration::from_secs(15);
    let mut took = Vec::new();
    while !theirs.is_empty() {
        let owners = owners(kv).await;
        theirs.retain(|shard| {
            let taken = owners.get(shard).is_some_and(|(owner, _)| owner != id);
            if taken {
                took.push(since.elapsed());
            }
            !taken
        });
        assert!(
            since.elapsed() < limit,
            "{} of {id}'s shards still not owned by another replica after {limit:?}",
            theirs.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took
}

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

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} failed");
}

/// One round's disruption of `replica`. Returns its death and how long
/// each of its shards stayed unowned.
async fn disrupt(
    kv: &mut etcd_client::Client,
    replica: &mut Replica,
    disruption: Disruption,
) -> (Death, Vec<Duration>) {
    let theirs: Vec<u32> = owners(kv)
        .await
        .into_iter()
        .filter(|(_, (owner, _))| owner == replica.id)
        .map(|(shard, _)| shard)
        .collect();
    let since = Instant::now();
    let stop = Duration::from_secs(15);
    let (death, took) = match disruption {
        Disruption::Kill => {
            let death = replica.kill();
            (death, reowned(kv, replica.id, theirs, since).await)
        }
        Disruption::Stop => {
            signal(replica.child.as_ref().expect("the replica runs"), "-TERM");
            let death = replica.exited(stop).await;
            (death, reowned(kv, replica.id, theirs, since).await)
        }
        Disruption::Blackhole => {
            replica.proxy.blackhole(true);
            let death = replica.exited(stop).await;
            (death, reowned(kv, replica.id, theirs, since).await)
        }
        Disruption::Partition => {
            replica.proxy.blackhole(true);
            replica.writes.blackhole(true);
            let death = replica.exited(stop).await;
            (death, reowned(kv, replica.id, theirs, since).await)
        }
        Disruption::Pause => {
            signal(replica.child.as_ref().expect("the replica runs"), "-STOP");
            let took = reowned(kv, replica.id, theirs, since).await;
            signal(replica.child.as_ref().expect("the replica runs"), "-CONT");
            let mut death = replica.exited(stop).await;
            death.paused = true;
            (death, took)
        }
    };
    replica.proxy.blackhole(false);
    replica.writes.blackhole(false);
    (death, took)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * (sorted.len().saturating_sub(1)) as f64).round() as usize;
    sorted.get(rank).copied().unwrap_or_default()
}

async fn start_replicas(etcd: &str, dir: &Path) -> Vec<Replica> {
    let target: std::net::SocketAddr = etcd.trim_start_matches("http://").parse().unwrap();
    let mut replicas = Vec::new();
    for id in IDS {
        let mut replica = Replica {
            id,
            proxy: Proxy::start(target).await.unwrap(),
            writes: Proxy::start(target).await.unwrap(),
            child: None,
            lives: 0,
            dir: dir.to_owned(),
        };
        replica.start();
        replicas.push(replica);
    }
    replicas
}

/// Changes `CHURN` items every 20 ms while the returned gate is not held,
/// so that handovers find reconciles in flight.
fn churn(
    mut kv: etcd_client::Client,
    mut rng: u64,
) -> (Arc<tokio::sync::Mutex<()>>, JoinHandle<()>) {
    let gate = Arc::new(tokio::sync::Mutex::new(()));
    let held = Arc::clone(&gate);
    let task = tokio::spawn(async move {
        loop {
            {
                let _open = held.lock().await;
                bump(&mut kv, &mut rng, CHURN).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (gate, task)
}

/// Waits (bounded) until `id` owns its whole share of the shards.
async fn owns_its_share(kv: &mut etcd_client::Client, id: &str) {
    let share = Assignment::compute(IDS, shards()).shards_of(id).count();
    let limit = Duration::from_secs(30);
    let started = Instant::now();
    loop {
        let owned = owners(kv)
            .await
            .values()
            .filter(|(owner, _)| owner == id)
            .count();
        if owned == share {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{id} owns {owned} of its {share} shards after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the rounds measured.
#[derive(Default)]
struct Rounds {
    deaths: Vec<Death>,
    /// How long a lost replica's shards stayed unowned.
    unowned: Vec<Duration>,
    /// How long a cleanly stopped replica's shards stayed unowned.
    handed: Vec<Duration>,
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
    bump(kv, rng, BUMPS).await;
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
    owns_its_share(kv, IDS[victim]).await;
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
    let seeded = seed(&mut kv).await;
    let history = History::follow(kv.clone(), "/chaos/", seeded + 1, shards());
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = start_replicas(&etcd.endpoint(), dir.path()).await;
    let items = items(kv.clone()).client();
    let first = converge(&mut kv, &items, "the first sync").await;
    eprintln!("all {KEYS} keys converged {first:?} after the start");
    let mut rng: u64 = 0x5eed_cafe;
    let (gate, churning) = churn(kv.clone(), rng ^ 0xc4a5);
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
        .extend(replicas.iter_mut().map(Replica::kill));
    let end = kv
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let history = history.until(end).await;
    let reconciles = parse_logs(dir.path(), &measured.deaths);
    check(rounds, &reconciles, &history, measured);
}

/// Reports the run and asserts its claims.
fn check(rounds: usize, reconciles: &[Reconcile], history: &Summary, measured: Rounds) {
    let Rounds {
        deaths,
        mut unowned,
        mut handed,
    } = measured;
    let (overlapping, paused) = overlaps(reconciles, &deaths);
    unowned.sort();
    handed.sort();
    let count = |outcomes: &[&str]| {
        reconciles
            .iter()
            .filter(|r| outcomes.contains(&r.outcome.as_str()))
            .count()
    };
    let (fenced, cut) = (count(&["fenced"]), count(&["killed", "cancelled"]));
    eprintln!(
        "{rounds} rounds: {} reconciles logged, {overlapping} overlapping across processes \
         (besides {paused} of paused processes, spanning the handover, none written); \
         {} fenced writes accepted by etcd, {} with a stale token; {fenced} writes refused as fenced; \
         {cut} reconciles cut by a kill or cancelled; \
         shards unowned after a kill, cut-off or pause: p50 {:?}, p99 {:?}, max {:?} ({} handovers); \
         after a clean stop: p50 {:?}, p99 {:?} ({} handovers)",
        reconciles.len(),
        history.fenced_writes,
        history.stale_writes,
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
        "reconciles of one key overlapped across processes"
    );
    assert_eq!(
        history.stale_writes, 0,
        "etcd accepted writes with a stale token"
    );
    assert!(
        history.fenced_writes > 0,
        "the history saw the replicas' writes"
    );
    let bound = timing().lease() + Duration::from_secs(1);
    assert!(
        percentile(&unowned, 0.99) <= bound,
        "a lost replica's shards stayed unowned longer than the lease + 1 s"
    );
}
