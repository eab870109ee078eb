//! A manager reconciling only while its Lease election leads.

use super::*;

/// Counts the reconciles of the replica it belongs to.
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl tend::controller::Reconciler<ConfigMap> for Counting {
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        _: tend::controller::Context<ConfigMap>,
    ) -> Result<tend::controller::Action, Self::Error> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(tend::controller::Action::Done)
    }
}

/// A manager leading through `election`, reconciling the maps of
/// `namespace`; its reconciles are counted in the returned counter.
fn replica(
    client: kube::Client,
    namespace: &str,
    election: KubeElection,
) -> (
    tend::manager::Manager,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let source = KubeSource::<ConfigMap>::namespaced(client, namespace);
    let mut manager = tend::manager::Manager::builder()
        .leader_election(election)
        .without_signals()
        .build()
        .expect("valid");
    let maps = manager
        .informer("configmaps", || tend::Informer::builder(source).build())
        .expect("registered");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let controller = manager
        .controller("maps", &maps, Counting(std::sync::Arc::clone(&count)))
        .build()
        .expect("valid");
    manager.add_controller(controller).expect("added");
    (manager, count)
}

#[tokio::test]
async fn a_manager_reconciles_only_while_its_lease_election_leads_and_a_standby_takes_over() {
    use std::sync::atomic::Ordering;
    let (client, ns) = setup("manager-lease").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    for name in ["a", "b", "c"] {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.to_owned());
        map.metadata.namespace = Some(ns.clone());
        maps.create(map).await.expect("created");
    }
    let (first, first_count) = replica(client.clone(), &ns, candidate(client.clone(), &ns, "one"));
    let first_stop = first.shutdown_token();
    let first_run = tokio::spawn(first.run());
    within("the first replica to reconcile", LIMIT, async {
        while first_count.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let (second, second_count) =
        replica(client.clone(), &ns, candidate(client.clone(), &ns, "two"));
    let second_stop = second.shutdown_token();
    let second_run = tokio::spawn(second.run());
    // Twice the lease: the standby's caches are warm, but it never leads.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        second_count.load(Ordering::Relaxed),
        0,
        "a standby reconciles nothing"
    );

    // The leader stops (and resigns): the standby takes over at once and
    // reconciles everything it now owns.
    let stopped = Instant::now();
    first_stop.cancel();
    within("the first replica to stop", LIMIT, first_run)
        .await
        .expect("joined")
        .expect("a clean stop");
    within("the standby to take over", LIMIT, async {
        while second_count.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "a resigned Lease is taken over within the retry period, not the lease: {:?}",
        stopped.elapsed()
    );
    second_stop.cancel();
    within("the second replica to stop", LIMIT, second_run)
        .await
        .expect("joined")
        .expect("a clean stop");
}
