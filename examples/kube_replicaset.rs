//! The ReplicaSet loop on Kubernetes, with kube-rs's own `ReplicaSet` and
//! `Pod` types (no wrapper): a tend controller keeps each set's pods at its
//! `spec.replicas` while chaos deletes pods, and follows two scale changes.
//! It uses `tend::kube` (`KubeSource`, its client with resourceVersion
//! preconditions and status writes, owner references) and, with
//! `--embedded`, `tend::testing::kube` (a real API server and etcd).
//!
//! ```sh
//! # starts its own kube-apiserver + etcd (TEND_KUBE_APISERVER_BIN, etcd on PATH)
//! cargo run --example kube_replicaset --features kube -- --embedded
//! # against the cluster of your KUBECONFIG, in namespace tend-demo
//! cargo run --example kube_replicaset --features kube -- --duration 60
//! ```
//!
//! Only the API server runs under `--embedded`: pods are stored, never
//! started (no scheduler, no kubelet), which is all a ReplicaSet
//! controller needs to be tested.

#[path = "../tests/support/kube_replicaset.rs"]
mod replicaset;
#[path = "support/summary.rs"]
mod summary;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use tend::kube::KubeSource;
use tend::testing::kube::ControlPlane;
use tend::{Informer, InformerError, ObjectKey, Source};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use replicaset::{Counts, Sets, Wiring, converged, replica_set, wire};
use summary::{Summary, verdict};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const NAMESPACE: &str = "tend-demo";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let duration = args
        .iter()
        .position(|a| a == "--duration")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(15), |s| s.parse::<u64>())
        .map(Duration::from_secs)?;
    let plane = if args.iter().any(|a| a == "--embedded") {
        println!("starting kube-apiserver and etcd on loopback …");
        Some(ControlPlane::start().await?)
    } else {
        None
    };
    let client = match &plane {
        Some(plane) => plane.client().await?,
        None => kube::Client::try_default().await?,
    };
    ensure_namespace(&client).await?;
    let counts = Arc::new(Counts::default());
    let reconciler = Sets {
        counts: Arc::clone(&counts),
        verbose: true,
    };
    let Wiring {
        sets: sets_informer,
        pods: pods_informer,
        controller,
    } = wire(&client, NAMESPACE, reconciler)?;
    let sets = KubeSource::<ReplicaSet>::namespaced(client.clone(), NAMESPACE).client();
    declare(&sets).await?;
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    spawn_informer(&mut tasks, &sets_informer, &stop);
    spawn_informer(&mut tasks, &pods_informer, &stop);
    let controller = tokio::spawn(controller.run(stop.clone()));
    let clock = Instant::now();
    let chaos_stop = stop.child_token();
    let chaos = tokio::spawn(chaos(client.clone(), chaos_stop.clone()));
    scale(&sets, clock + duration.mul_f64(0.35), "web", 5).await?;
    scale(&sets, clock + duration.mul_f64(0.6), "api", 1).await?;
    tokio::time::sleep_until(clock + duration.mul_f64(0.75)).await;
    chaos_stop.cancel();
    let chaos_deleted = chaos.await??;
    println!("[{:>5.2}s] chaos stops", clock.elapsed().as_secs_f64());
    tokio::time::sleep_until(clock + duration).await;
    let cached = converged(&sets_informer, &pods_informer);
    stop.cancel();
    controller.await??;
    while tasks.join_next().await.is_some() {}
    let live = live_counts(&client).await?;
    println!("{}", summary(&counts, chaos_deleted, live, cached));
    Ok(())
}

/// `live`: the pods of web and api on the API server; `cached`: whether
/// the informers' caches showed them converged too.
fn summary(counts: &Counts, chaos_deleted: usize, live: (usize, usize), cached: bool) -> Summary {
    Summary::default()
        .line(format!("chaos: {chaos_deleted} pods deleted"))
        .line(format!(
            "controller: {} reconciles, {} pods created, {} deleted",
            counts.reconciles.load(Ordering::Relaxed),
            counts.created.load(Ordering::Relaxed),
            counts.deleted.load(Ordering::Relaxed),
        ))
        .line(format!(
            "final (read from the API server): web has {} of 5, api has {} of 1: {}",
            live.0,
            live.1,
            verdict(cached && live == (5, 1), "converged"),
        ))
}

/// `web` wants 3 pods, `api` 2 (created, or put back as declared).
async fn declare(sets: &tend::client::Client<ReplicaSet>) -> Result<(), BoxError> {
    for (name, replicas) in [("web", 3), ("api", 2)] {
        println!("declare  ReplicaSet {name} wants {replicas} pods");
        let declared = replica_set(NAMESPACE, name, replicas);
        let spec = declared.spec.clone();
        sets.create_or_update(declared, |set| set.spec.clone_from(&spec))
            .await?;
    }
    Ok(())
}

fn spawn_informer<O: tend::Object>(
    tasks: &mut JoinSet<Result<(), InformerError>>,
    informer: &Informer<O>,
    stop: &CancellationToken,
) {
    let (informer, stop) = (informer.clone(), stop.clone());
    tasks.spawn(async move { informer.run(stop).await });
}

async fn ensure_namespace(client: &kube::Client) -> Result<(), BoxError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &namespace).await {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        result => result.map(drop).map_err(Into::into),
    }
}

async fn scale(
    sets: &tend::client::Client<ReplicaSet>,
    at: Instant,
    name: &str,
    replicas: i32,
) -> Result<(), BoxError> {
    tokio::time::sleep_until(at).await;
    let key = ObjectKey::new(NAMESPACE, name);
    sets.modify(&key, |set| {
        if let Some(spec) = set.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    })
    .await?;
    println!("declare  ReplicaSet {name} now wants {replicas} pods");
    Ok(())
}

/// Deletes a random pod every 400 ms until `stop`; returns how many.
async fn chaos(client: kube::Client, stop: CancellationToken) -> Result<usize, BoxError> {
    let source = KubeSource::<Pod>::namespaced(client, NAMESPACE);
    let pods = source.client();
    let mut deleted = 0;
    while stop
        .run_until_cancelled(tokio::time::sleep(Duration::from_millis(400)))
        .await
        .is_some()
    {
        let all = source.list().await?.objects;
        if all.is_empty() {
            continue;
        }
        let victim = &all[fastrand::usize(..all.len())];
        if pods.delete(&tend::Object::key(victim)).await.is_ok() {
            println!("  chaos    delete {}", tend::Object::key(victim));
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Live pods of web and api, read from the API server.
async fn live_counts(client: &kube::Client) -> Result<(usize, usize), BoxError> {
    let pods = KubeSource::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list()
        .await?;
    let of = |set: &str| {
        pods.objects
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| replicaset::owner_of(pod).is_some_and(|o| o.name == set))
            .count()
    };
    Ok((of("web"), of("api")))
}
