//! End to end: the ReplicaSet controller with its state in etcd, three
//! replicas under Managers with etcd leader election, the leader killed
//! mid-run.

#![cfg(feature = "etcd")]

#[path = "support/etcd_replicaset.rs"]
mod replicaset;
#[path = "support/etcd.rs"]
mod support;

use std::time::Duration;

use tend::Source;
use tend::election::ElectionConfig;
use tend::etcd::EtcdElection;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use replicaset::{ELECTION, Pod, ReplicaConfig, ReplicaSet, pods, replicasets, run_replica};
use support::{client, server, within};

async fn pod_count(source: &tend::etcd::EtcdSource<Pod>) -> usize {
    source.list().await.map_or(0, |s| s.objects.len())
}

async fn converge(source: &tend::etcd::EtcdSource<Pod>, want: usize, what: &str) -> usize {
    let mut max = 0;
    within(what, Duration::from_secs(20), async {
        let mut stable_since: Option<Instant> = None;
        loop {
            let count = pod_count(source).await;
            max = max.max(count);
            if count == want {
                let since = *stable_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(700) {
                    break;
                }
            } else {
                stable_since = None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_converges_on_etcd_when_the_leader_is_killed() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let sets = replicasets(kv.clone());
    let pod_source = pods(kv.clone());
    let observer = EtcdElection::builder(kv.clone(), ELECTION).build().unwrap();
    let election = ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap();
    let mut set = sets
        .client()
        .create(ReplicaSet {
            name: "web".into(),
            replicas: 5,
            version: tend::Revision::ZERO,
        })
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let mut replicas = start_replicas(&etcd.endpoint(), election, &shutdown);
    converge(&pod_source, 5, "5 pods").await;

    // Scale up and kill the leader right away, mid-reconcile.
    let leader = within("a leader", Duration::from_secs(5), observer.leader())
        .await
        .unwrap()
        .expect("someone leads");
    set.replicas = 9;
    set = sets.client().update(set).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let index = replicas.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, killed) = replicas.remove(index);
    killed.abort();
    let _ = killed.await;
    let killed_at = Instant::now();
    let next = next_leader(&observer, &leader).await;
    eprintln!("failover in {:?}", killed_at.elapsed());
    let max = converge(&pod_source, 9, "9 pods under a new leader").await;
    eprintln!("killed {leader}, {next} leads; at most {max} pods seen");

    // Chaos under the new leader: pods deleted behind its back come back.
    delete_three_pods(&pod_source).await;
    converge(&pod_source, 9, "9 pods after chaos").await;
    set.replicas = 4;
    sets.client().update(set).await.unwrap();
    converge(&pod_source, 4, "4 pods after scaling down").await;
    let final_pods = pod_source.list().await.unwrap().objects;
    assert!(final_pods.iter().all(|p| p.owner == "web"));

    shutdown.cancel();
    for (id, task) in replicas {
        let stopped = within("a replica to stop", Duration::from_secs(10), task).await;
        eprintln!("{id} stopped: {stopped:?}");
    }
}

/// A replica's identity and its running task.
type Running = (
    String,
    JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>>,
);

/// Three replicas on etcd at `endpoint`, until `shutdown`.
fn start_replicas(
    endpoint: &str,
    election: ElectionConfig,
    shutdown: &CancellationToken,
) -> Vec<Running> {
    let mut replicas = Vec::new();
    for i in 0..3 {
        let config = ReplicaConfig {
            identity: format!("replica-{i}"),
            endpoint: endpoint.to_owned(),
            election,
            verbose: false,
        };
        replicas.push((
            config.identity.clone(),
            tokio::spawn(run_replica(config, shutdown.clone())),
        ));
    }
    replicas
}

/// The next leader other than `leader`.
async fn next_leader(observer: &EtcdElection, leader: &str) -> String {
    within("another replica to lead", Duration::from_secs(5), async {
        loop {
            match observer.leader().await {
                Ok(Some(next)) if next != leader => break next,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
}

/// Deletes three pods behind the controller's back.
async fn delete_three_pods(pod_source: &tend::etcd::EtcdSource<Pod>) {
    let listed = pod_source.list().await.unwrap();
    for pod in listed.objects.iter().take(3) {
        pod_source
            .client()
            .delete_at(&pod.name, pod.version)
            .await
            .unwrap();
    }
}
