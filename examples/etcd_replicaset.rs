//! The ReplicaSet loop with its state in etcd and several replicas under
//! leader election: only the leader reconciles, every write is fenced with
//! its token, and when the leader dies another replica takes over.
//!
//! ```sh
//! # one process, three replicas, the leader killed mid-run; starts its
//! # own etcd (needs the `etcd` binary: apt-get install -y etcd-server)
//! cargo run --example etcd_replicaset --features etcd -- --embedded
//!
//! # against a running etcd (etcd --data-dir /tmp/tend-etcd), one replica
//! # per terminal; Ctrl-C one and watch another take over
//! cargo run --example etcd_replicaset --features etcd -- --replica 1
//! cargo run --example etcd_replicaset --features etcd -- --replica 2
//! ```

#[path = "support/etcd.rs"]
mod etcd;
#[path = "../tests/support/etcd_replicaset.rs"]
mod replicaset;

use std::time::Duration;

use tend::client::ClientError;
use tend::election::ElectionConfig;
use tend::etcd::{EtcdElection, EtcdSource};
use tend::testing::etcd::connect;
use tend::{BoxError, Source};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use etcd::Etcd;
use replicaset::{ELECTION, Pod, ReplicaConfig, ReplicaSet, pods, replicasets, run_replica};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let target = Etcd::from_args().await?;
    let endpoint = target.endpoint.clone();
    let election = ElectionConfig::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )?;
    seed(&endpoint).await?;
    if let Some(replica) = etcd::arg("--replica") {
        let config = ReplicaConfig {
            identity: format!("replica-{replica}"),
            endpoint,
            election,
            verbose: true,
        };
        println!("{} campaigning; Ctrl-C to stop", config.identity);
        let stop = CancellationToken::new();
        let ctrl_c = stop.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            ctrl_c.cancel();
        });
        return run_replica(config, stop).await;
    }
    let duration = etcd::duration_or(Duration::from_secs(16));
    in_one_process(endpoint, election, duration).await
}

/// Creates the replica set `web` (4 pods) unless it exists.
async fn seed(endpoint: &str) -> Result<(), BoxError> {
    let client = connect(endpoint).await?;
    let web = ReplicaSet {
        name: "web".into(),
        replicas: 4,
        version: tend::Revision::ZERO,
    };
    match replicasets(client).client().create(web).await {
        Ok(_) | Err(ClientError::AlreadyExists { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// A replica running as a task, by identity.
type Replica = (String, JoinHandle<Result<(), BoxError>>);

/// Three replicas as tasks; the leader is killed halfway.
async fn in_one_process(
    endpoint: String,
    election: ElectionConfig,
    duration: Duration,
) -> Result<(), BoxError> {
    let client = connect(&endpoint).await?;
    let observer = EtcdElection::builder(client.clone(), ELECTION).build()?;
    let pod_source = pods(client);
    let stop = CancellationToken::new();
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|i| {
            let config = ReplicaConfig {
                identity: format!("replica-{i}"),
                endpoint: endpoint.clone(),
                election,
                verbose: true,
            };
            let id = config.identity.clone();
            (id, tokio::spawn(run_replica(config, stop.clone())))
        })
        .collect();
    let start = Instant::now();
    let mut killed = None;
    let mut chaos = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while start.elapsed() < duration {
        tick.tick().await;
        let leader = observer.leader().await?.unwrap_or_else(|| "nobody".into());
        let count = pod_source.list().await.map_or(0, |s| s.objects.len());
        println!(
            "[{:>5.1}s] leader: {leader}, pods: {count}",
            start.elapsed().as_secs_f64()
        );
        if !chaos && start.elapsed() >= duration * 3 / 4 {
            chaos = true;
            delete_two(&pod_source, start).await?;
        }
        if killed.is_none() && start.elapsed() >= duration / 2 {
            killed = kill(&mut replicas, &leader, start).await;
        }
    }
    let leader = observer.leader().await?;
    stop.cancel();
    for (_, task) in replicas {
        let _ = task.await;
    }
    let pods = pod_source.list().await?.objects;
    println!(
        "final: web wants 4, has {} pods; killed {}, leader at the end {}",
        pods.len(),
        killed.unwrap_or_else(|| "nobody".into()),
        leader.unwrap_or_else(|| "nobody (all stopped)".into())
    );
    Ok(())
}

/// Chaos: two pods deleted behind the controller's back.
async fn delete_two(pod_source: &EtcdSource<Pod>, start: Instant) -> Result<(), BoxError> {
    let writer = pod_source.client();
    for pod in pod_source.list().await?.objects.iter().take(2) {
        writer.delete_at(&pod.name, pod.version).await?;
        println!(
            "[{:>5.1}s] CHAOS deleted {}",
            start.elapsed().as_secs_f64(),
            pod.name
        );
    }
    Ok(())
}

/// Kills the `leader` as a crash, if it is one of `replicas`: its identity.
async fn kill(replicas: &mut Vec<Replica>, leader: &str, start: Instant) -> Option<String> {
    let index = replicas.iter().position(|(id, _)| id == leader)?;
    let (id, task) = replicas.remove(index);
    task.abort();
    let _ = task.await;
    println!(
        "[{:>5.1}s] KILLED {id} (no resign: its lease must expire)",
        start.elapsed().as_secs_f64()
    );
    Some(id)
}
