//! Stalled leaders and deleted leases.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leader_stops_acting_at_its_local_deadline_before_anyone_else_leads() {
    let (client, namespace) = setup("stall").await;
    let key = config_map(&client, &namespace).await;
    let (proxy, url) = proxy().await;
    let stalled = client_for(plane().await.kubeconfig(), Some(&url)).await;
    let a = candidate(stalled.clone(), &namespace, "a");
    let a_writes = KubeSource::<ConfigMap>::namespaced(stalled, &namespace).client_fenced_by(&a);
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let written = act(&a_writes.fenced(token), &key, "a")
        .await
        .expect("the leader writes");

    let b = candidate(client.clone(), &namespace, "b");
    let b_task = tokio::spawn({
        let b = b.clone();
        async move {
            let token = b.campaign().await.unwrap();
            (Instant::now(), token)
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cut = Instant::now();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    let a_stopped = Instant::now();
    assert!(!a.is_leader());
    let refused = write_back(&a_writes.fenced(token), &written).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );

    let (b_won, b_token) = within("b to win", LIMIT, b_task).await.unwrap();
    eprintln!(
        "a stopped {:?} after the cut, b won {:?} after the cut",
        a_stopped - cut,
        b_won - cut
    );
    assert!(a_stopped < b_won, "the stalled leader stopped before b won");
    assert!(a_stopped - cut <= fast().renew_deadline() + Duration::from_millis(300));
    assert!(b_token > token);
    let b_writes = KubeSource::<ConfigMap>::namespaced(client, &namespace).client_fenced_by(&b);
    act(&b_writes.fenced(b_token), &key, "b")
        .await
        .expect("the new leader writes");
    // Healed, a is still out: its old token stays fenced.
    proxy.blackhole(false);
    let refused = write_back(&a_writes.fenced(token), &written).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_deleted_loses_and_the_next_token_is_still_greater() {
    let (client, namespace) = setup("deleted").await;
    let a = candidate(client.clone(), &namespace, "a");
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    within(
        "deleting the Lease",
        LIMIT,
        api.delete(LEASE, &DeleteParams::default()),
    )
    .await
    .unwrap();
    let bound = fast().retry_period() * 2 + Duration::from_millis(500);
    within("a to notice the Lease is gone", bound, a.lost()).await;
    let b = candidate(client.clone(), &namespace, "b");
    let next = within("b to win", LIMIT, b.campaign()).await.unwrap();
    assert!(
        next > token,
        "a re-created Lease's token {next} is above {token}"
    );
    let created = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(
        created.lease_transitions,
        Some(0),
        "leaseTransitions started over"
    );
}
