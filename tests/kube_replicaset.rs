//! End to end on a real API server: the ReplicaSet controller over
//! kube-rs's `ReplicaSet` and `Pod` converges while chaos deletes pods, with
//! no pod created twice for one gap (read-your-writes, no expectations).

#[path = "support/kube.rs"]
mod kube_support;
#[path = "support/kube_replicaset.rs"]
mod replicaset;
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube_support::fresh;
use replicaset::{Counts, Sets, Wiring, converged, replica_set, wire};
use support::{wait_until, within};
use tend::kube::KubeSource;
use tend::{Object, Source};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicaset_controller_converges_under_chaos_deletes() {
    let (client, ns) = fresh("e2e-replicaset").await;
    let counts = Arc::new(Counts::default());
    let Wiring {
        sets,
        pods,
        controller,
    } = wire(
        &client,
        &ns,
        Sets {
            counts: Arc::clone(&counts),
            verbose: false,
        },
    )
    .expect("wired");
    let set_client = KubeSource::<ReplicaSet>::namespaced(client.clone(), &ns).client();
    for (name, replicas) in [("web", 5), ("api", 3), ("db", 1)] {
        set_client
            .create(replica_set(&ns, name, replicas))
            .await
            .expect("declared");
    }
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let (set_informer, set_stop) = (sets.clone(), stop.clone());
    tasks.spawn(async move { drop(set_informer.run(set_stop).await) });
    let (pod_informer, pod_stop) = (pods.clone(), stop.clone());
    tasks.spawn(async move { drop(pod_informer.run(pod_stop).await) });
    let running = tokio::spawn(controller.run(stop.clone()));
    wait_until("first convergence", LIMIT, || converged(&sets, &pods)).await;

    // Chaos: delete 15 pods, one every 100 ms.
    let pod_source = KubeSource::<Pod>::namespaced(client.clone(), &ns);
    let pod_client = pod_source.client();
    let mut chaos = 0;
    while chaos < 15 {
        let all = pod_source.list().await.expect("listed").objects;
        let live: Vec<_> = all.iter().filter(|p| p.deletion().is_none()).collect();
        if let Some(victim) = live.get(fastrand::usize(..live.len().max(1)))
            && pod_client.delete(&victim.key()).await.is_ok()
        {
            chaos += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until("convergence after chaos", LIMIT, || converged(&sets, &pods)).await;
    let live = pod_source.list().await.expect("listed").objects.len();
    assert_eq!(live, 9, "5 + 3 + 1 pods on the server");
    let created = counts.created.load(Ordering::Relaxed);
    assert_eq!(created, 9 + chaos, "one create per missing pod, none twice");
    stop.cancel();
    within("the controller to stop", LIMIT, running)
        .await
        .expect("joined")
        .expect("clean");
    while tasks.join_next().await.is_some() {}
}
