//! Failover, kill rounds and cut-off leaders.

use super::*;

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
            campaign_and_write(election, writer, format!("counter-{i}"), log, stop).await;
        });
    }
    drop(log_tx);
    let mut deposed = Vec::new();
    for round in 0..20 {
        // Let the leader write, then end its lease behind its back.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (token, at) = depose_the_leader(&mut kv).await;
        deposed.push((token, at));
        eprintln!(
            "round {round}: deposed token {} at revision {at}",
            token.get()
        );
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
    assert_no_token_wrote_after_its_deposition(&writes, &deposed);
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

/// A replica: campaigns, then for 3 s writes as fast as it can with its
/// token, leader or not (one that has not yet noticed its deposition),
/// logging every write that landed; resigns and campaigns again.
async fn campaign_and_write(
    election: EtcdElection,
    writer: tend::client::Client<Item>,
    name: String,
    log: tokio::sync::mpsc::UnboundedSender<Logged>,
    stop: tokio_util::sync::CancellationToken,
) {
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
}

/// Ends the oldest candidate's lease behind its back: its token, and the
/// revision at which it was deposed.
async fn depose_the_leader(kv: &mut Client) -> (FencingToken, u64) {
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
    (FencingToken::new(lease.1 as u64), at)
}

/// Every write landed in token order, none with a token after it was
/// deposed.
fn assert_no_token_wrote_after_its_deposition(writes: &[Logged], deposed: &[(FencingToken, u64)]) {
    for (token, at) in deposed {
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
