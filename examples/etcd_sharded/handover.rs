//! The handover the run checks: a replica killed as a crash and its
//! shards taken over, no key reconciled by two replicas at once, and a
//! write with the killed replica's last token refused.

use std::collections::HashMap;
use std::time::Duration;

use tend::client::{Client, ClientError, FencingToken};
use tend::etcd::EtcdMembership;
use tend::etcd::etcd_client;
use tend::manager::{Manager, ManagerError};
use tend::{BoxError, CancellationToken};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::store::{owners, shares};
use crate::{Item, Log, Record, VICTIM, items};

/// A replica's manager running as a task.
pub(crate) struct Running {
    name: &'static str,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Running {
    pub(crate) fn start(name: &'static str, manager: Manager) -> Self {
        Self {
            name,
            stop: manager.shutdown_token(),
            task: tokio::spawn(manager.run()),
        }
    }

    /// A clean stop: the replica gives its shards up and leaves.
    pub(crate) async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        Ok(self.task.await??)
    }

    /// As a crash: the task is dropped, nothing is released or revoked.
    pub(crate) async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// What the handover of the killed replica's shards took.
pub(crate) struct Handover {
    pub(crate) shards: usize,
    pub(crate) unowned: Duration,
    /// The killed replica's last token, from the log.
    token: Option<FencingToken>,
    key: Option<String>,
}

/// Kills the victim (as a crash) and waits until every shard it owned is
/// owned by another replica.
pub(crate) async fn kill(
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

/// A write with the killed replica's last token, through a live
/// replica's fenced client: refused, and the item unchanged.
pub(crate) async fn stale_write(
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
/// Pairs of reconciles of one key, by different replicas, that overlapped
/// in time.
pub(crate) fn overlaps(log: &[Record]) -> usize {
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
