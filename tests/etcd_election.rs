//! The etcd client's writes and leader election against a real etcd on loopback:
//! conflicts, fencing, failover (tasks and SIGKILLed processes) and a
//! leader cut off from etcd.

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tend::client::{ClientError, FencingToken};
use tend::election::{ElectionConfig, LeaderElector};
use tend::etcd::etcd_client::{Client, GetOptions};
use tend::etcd::{ElectionBuildError, EtcdElection};
use tend::testing::etcd::connect;
use tokio::time::Instant;

use support::{Item, client, server, source, through_proxy, within};

const LIMIT: Duration = Duration::from_secs(10);
const ELECTION: &str = "test-election";
const ELECTION_PREFIX: &str = "tend/elections/test-election/";

/// Short timings for tests: lease 2 s (etcd's minimum), renew deadline
/// 1.5 s, retry period 0.5 s.
fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn candidate(client: Client, identity: &str) -> EtcdElection {
    EtcdElection::builder(client, ELECTION)
        .identity(identity)
        .config(fast())
        .build()
        .expect("a valid election name")
}

/// The lease of the current leader key, from etcd.
async fn leader_lease(kv: &mut Client) -> i64 {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(
            tend::etcd::etcd_client::SortTarget::Create,
            tend::etcd::etcd_client::SortOrder::Ascend,
        )
        .with_limit(1);
    let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
    response.kvs().first().expect("a leader key").lease()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_detects_conflicts_and_writes_nothing() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let writer = source(kv.clone()).client();
    let created = writer.create(Item::new("a", 1)).await.unwrap();
    assert!(created.version.get() > 0);
    assert!(matches!(
        writer.create(Item::new("a", 2)).await,
        Err(ClientError::AlreadyExists { .. })
    ));
    let mut next = created.clone();
    next.value = 2;
    let updated = writer.update(next).await.unwrap();
    assert!(updated.version > created.version);
    let mut stale = created.clone();
    stale.value = 3;
    match writer.update(stale).await {
        Err(ClientError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, created.version);
            assert_eq!(actual, updated.version);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        writer.delete_at(&created.name, created.version).await,
        Err(ClientError::Conflict { .. })
    ));
    assert!(matches!(
        writer.update(Item::new("missing", 1)).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        writer.delete(&"missing".to_owned()).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        writer
            .fenced(FencingToken::new(1))
            .create(Item::new("b", 1))
            .await,
        Err(ClientError::NoFencing)
    ));
    let stored = tend::Source::list(&source(kv.clone())).await.unwrap();
    assert_eq!(stored.objects.len(), 1);
    assert_eq!(stored.objects[0].value, 2, "no refused write landed");
    writer
        .delete_at(&updated.name, updated.version)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_write_from_a_deposed_leader_is_rejected() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    let writer_a = source(kv.clone()).client_fenced_by(&a);
    let writer_b = source(kv.clone()).client_fenced_by(&b);
    let token_a = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let item = writer_a
        .fenced(token_a)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    // A's lease ends behind its back (an expiry while it was paused): B
    // wins; A still writes with its old token.
    let lease = leader_lease(&mut kv).await;
    kv.lease_revoke(lease).await.unwrap();
    let token_b = within("b to win", LIMIT, b.campaign()).await.unwrap();
    assert!(token_b > token_a, "tokens grow");
    let mut late = item.clone();
    late.value = 99;
    assert!(matches!(
        writer_a.fenced(token_a).update(late).await,
        Err(ClientError::Fenced { token }) if token == token_a
    ));
    assert!(matches!(
        writer_a.fenced(token_a).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { .. })
    ));
    // B's writes land.
    let mut next = item.clone();
    next.value = 2;
    writer_b.fenced(token_b).update(next).await.unwrap();
    let stored = tend::Source::list(&source(kv.clone())).await.unwrap();
    assert_eq!(stored.objects.len(), 1);
    assert_eq!(stored.objects[0].value, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_elect_one_leader_and_fail_over_within_the_lease() {
    let etcd = server().await;
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(candidate(client(&etcd).await, &format!("r{i}")));
    }
    let mut next = 3;
    let mut tasks = tokio::task::JoinSet::new();
    for replica in &replicas {
        let replica = replica.clone();
        tasks.spawn(async move { replica.campaign().await });
    }
    let mut last_token = FencingToken::new(0);
    for round in 0..3 {
        within("a leader", LIMIT, async {
            while !replicas.iter().any(EtcdElection::is_leader) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let leaders: Vec<_> = replicas.iter().filter(|r| r.is_leader()).collect();
        assert_eq!(leaders.len(), 1, "round {round}: exactly one leader");
        let token = leaders[0].token().unwrap();
        assert!(token > last_token, "tokens grow");
        last_token = token;
        // Kill the leader without resigning: its renewals stop, its lease
        // expires on the server.
        let index = replicas.iter().position(EtcdElection::is_leader).unwrap();
        drop(replicas.remove(index));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        let killed = Instant::now();
        let fresh = candidate(client(&etcd).await, &format!("r{next}"));
        next += 1;
        replicas.push(fresh);
        for replica in &replicas {
            let replica = replica.clone();
            tasks.spawn(async move { replica.campaign().await });
        }
        let bound = fast().lease() + Duration::from_secs(1);
        within("another replica to lead within lease + 1 s", bound, async {
            while !replicas.iter().any(EtcdElection::is_leader) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        eprintln!("round {round}: failover in {:?}", killed.elapsed());
    }
}

/// One replica's fenced write, as logged.
#[derive(Debug, Clone, Copy)]
struct Logged {
    token: FencingToken,
    revision: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_rounds_accept_no_fenced_write_from_a_non_leader() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let (log_tx, mut log_rx) = tokio::sync::mpsc::unbounded_channel::<Logged>();
    let mut replicas = tokio::task::JoinSet::new();
    let stop = tokio_util::sync::CancellationToken::new();
    for i in 0..3 {
        let election = candidate(client(&etcd).await, &format!("r{i}"));
        let writer = source(client(&etcd).await).client_fenced_by(&election);
        let (log, stop) = (log_tx.clone(), stop.clone());
        replicas.spawn(async move {
            let name = format!("counter-{i}");
            while !stop.is_cancelled() {
                let Ok(token) = election.campaign().await else {
                    continue;
                };
                // Write as fast as possible with this token, leader or not
                // (a replica that has not yet noticed its deposition).
                let deadline = Instant::now() + Duration::from_secs(3);
                while Instant::now() < deadline && !stop.is_cancelled() {
                    let item = Item::new(name.clone(), token.get());
                    let fenced = writer.fenced(token);
                    let _ = fenced.delete(&name).await;
                    if let Ok(stored) = fenced.create(item).await {
                        let _ = log.send(Logged {
                            token,
                            revision: stored.version.get(),
                        });
                    }
                }
                let _ = election.resign().await;
            }
        });
    }
    drop(log_tx);
    let mut deposed = Vec::new();
    for round in 0..20 {
        // Let the leader write, then end its lease behind its back.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let lease = within("a leader key", LIMIT, async {
            loop {
                let options = GetOptions::new().with_prefix();
                let keys = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
                if let Some(first) = keys.kvs().iter().min_by_key(|kv| kv.create_revision()) {
                    break (first.lease(), first.create_revision());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let revoked = kv.lease_revoke(lease.0).await.unwrap();
        let at = revoked.header().unwrap().revision() as u64;
        deposed.push((FencingToken::new(lease.1 as u64), at));
        eprintln!("round {round}: deposed token {} at revision {at}", lease.1);
    }
    stop.cancel();
    within("the replicas to stop", LIMIT, async {
        while replicas.join_next().await.is_some() {}
    })
    .await;
    let mut writes = Vec::new();
    while let Some(write) = log_rx.recv().await {
        writes.push(write);
    }
    writes.sort_by_key(|w| w.revision);
    assert!(writes.len() > 20, "replicas wrote: {}", writes.len());
    for (token, at) in &deposed {
        let late: Vec<_> = writes
            .iter()
            .filter(|w| w.token == *token && w.revision > *at)
            .collect();
        assert!(
            late.is_empty(),
            "token {token} deposed at {at} wrote later: {late:?}"
        );
    }
    for pair in writes.windows(2) {
        assert!(
            pair[0].token <= pair[1].token,
            "an older leader wrote after a newer one: {pair:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_before_its_lease_expires() {
    let etcd = server().await;
    let (proxy, through) = through_proxy(&etcd).await;
    let a = candidate(through, "a");
    let b = candidate(client(&etcd).await, "b");
    within("a to win", LIMIT, a.campaign()).await.unwrap();
    let b_task = tokio::spawn({
        let b = b.clone();
        async move {
            b.campaign().await.unwrap();
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cut = Instant::now();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    let a_stopped = Instant::now();
    assert!(!a.is_leader());
    let b_won = within("b to win", LIMIT, b_task).await.unwrap();
    eprintln!(
        "a stopped {:?} after the cut, b won {:?} after the cut",
        a_stopped - cut,
        b_won - cut
    );
    assert!(
        a_stopped < b_won,
        "the cut-off leader stopped before the new leader won"
    );
    assert!(a_stopped - cut <= fast().renew_deadline() + Duration::from_millis(200));
}

/// The replica process of the SIGKILL test: campaigns, prints `LEADER
/// <token>` once elected, and idles. Runs only when spawned by that test.
#[test]
#[ignore = "run as a child process by replicas_as_processes_fail_over_after_sigkill"]
fn replica_process() {
    let Ok(endpoint) = std::env::var("TEND_TEST_REPLICA_ENDPOINT") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = connect(&endpoint).await.unwrap();
        let election = candidate(client, &format!("pid-{}", std::process::id()));
        let token = election.campaign().await.unwrap();
        println!("LEADER {} {token}", std::process::id());
        election.lost().await;
        println!("LOST {}", std::process::id());
    });
}

fn spawn_replica(endpoint: &str, lines: &mpsc::Sender<String>) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["replica_process", "--exact", "--ignored", "--nocapture"])
        .env("TEND_TEST_REPLICA_ENDPOINT", endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("LEADER ") && lines.send(line).is_err() {
                break;
            }
        }
    });
    child
}

/// Kills its children on drop, even when the test panics.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_as_processes_fail_over_after_sigkill() {
    let etcd = server().await;
    let (tx, rx) = mpsc::channel();
    let mut children = Children(
        (0..3)
            .map(|_| spawn_replica(&etcd.endpoint(), &tx))
            .collect(),
    );
    let next_leader = |limit: Duration| -> (u32, u64) {
        let line = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no replica led within {limit:?}"));
        let mut parts = line.split_whitespace().skip(1);
        let pid = parts.next().unwrap().parse().unwrap();
        let token = parts.next().unwrap().parse().unwrap();
        (pid, token)
    };
    let (mut pid, mut token) = tokio::task::block_in_place(|| next_leader(LIMIT));
    for round in 0..2 {
        let index = children.0.iter().position(|c| c.id() == pid).unwrap();
        let mut leader = children.0.remove(index);
        leader.kill().unwrap(); // SIGKILL: no resign, no cleanup
        leader.wait().unwrap();
        let killed = Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next_pid, next_token) = tokio::task::block_in_place(|| next_leader(bound));
        eprintln!("round {round}: process failover in {:?}", killed.elapsed());
        assert_ne!(next_pid, pid);
        assert!(next_token > token);
        (pid, token) = (next_pid, next_token);
    }
}

/// The oldest candidate key: its name and create revision.
async fn oldest_key(kv: &mut Client) -> Option<(Vec<u8>, i64)> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(
            tend::etcd::etcd_client::SortTarget::Create,
            tend::etcd::etcd_client::SortOrder::Ascend,
        )
        .with_limit(1);
    let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
    response
        .kvs()
        .first()
        .map(|kv| (kv.key().to_vec(), kv.create_revision()))
}

/// Waits until `count` candidate keys exist.
async fn candidates(kv: &mut Client, count: usize) {
    within("the candidate keys", LIMIT, async {
        loop {
            let options = GetOptions::new().with_prefix().with_count_only();
            let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
            if response.count() >= count as i64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_key_is_deleted_loses_within_the_retry_period() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    within("a to win", LIMIT, a.campaign()).await.unwrap();
    let b_task = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    candidates(&mut kv, 2).await;
    // Someone deletes the leader's key while its lease lives on.
    let (key, _) = oldest_key(&mut kv).await.unwrap();
    kv.delete(key, None).await.unwrap();
    let bound = fast().retry_period() + Duration::from_millis(500);
    within("a to notice its key is gone", bound, a.lost()).await;
    assert!(!a.is_leader());
    let token_b = within("b to win", LIMIT, b_task).await.unwrap().unwrap();
    assert!(b.is_leader() && !a.is_leader(), "one leader");
    assert_eq!(
        oldest_key(&mut kv)
            .await
            .map(|(_, rev)| FencingToken::new(rev as u64)),
        Some(token_b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_every_candidate_key_leaves_one_leader_that_holds_its_key() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    let token_a = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let b_task = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    candidates(&mut kv, 2).await;
    // `etcdctl del --prefix` on the election's prefix.
    kv.delete(
        ELECTION_PREFIX,
        Some(tend::etcd::etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    let bound = fast().retry_period() + Duration::from_millis(500);
    within("a to notice its key is gone", bound, a.lost()).await;
    let token_b = within("b to win", LIMIT, b_task).await.unwrap().unwrap();
    assert!(token_b > token_a);
    assert!(b.is_leader() && !a.is_leader(), "one leader");
    // B won with a key of its own, not with its deleted one.
    assert_eq!(
        oldest_key(&mut kv)
            .await
            .map(|(_, rev)| FencingToken::new(rev as u64)),
        Some(token_b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_after_the_local_deadline_is_refused() {
    let etcd = server().await;
    let (proxy, through) = through_proxy(&etcd).await;
    let a = candidate(through, "a");
    // The writer reaches etcd directly: only the election is cut off.
    let writer = source(client(&etcd).await).client_fenced_by(&a);
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    writer
        .fenced(token)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    // The lease still lives on the server (it outlasts the renew
    // deadline), so etcd alone would accept the write.
    assert!(matches!(
        writer.fenced(token).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { token: t }) if t == token
    ));
    assert!(matches!(
        writer.fenced(token).delete(&"x".to_owned()).await,
        Err(ClientError::Fenced { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_names_that_would_share_a_prefix_are_refused() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    for name in ["a/b", "", "/"] {
        assert!(
            matches!(
                EtcdElection::builder(kv.clone(), name).build(),
                Err(ElectionBuildError::InvalidName { .. })
            ),
            "{name:?} is refused"
        );
    }
    EtcdElection::builder(kv, "a").build().unwrap();
}
