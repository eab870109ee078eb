//! Building, leading, resigning and crashing.

use super::*;

#[test]
fn names_the_api_server_would_refuse_are_refused_when_building() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let build = |namespace: &str, name: &str, identity: &str| {
        KubeElection::builder(client.clone(), namespace, name)
            .identity(identity)
            .build()
            .map(drop)
    };
    assert!(matches!(
        build("default", "My_Lease", "a"),
        Err(ElectionBuildError::InvalidName { .. })
    ));
    assert!(matches!(
        build("kube.system", "lease", "a"),
        Err(ElectionBuildError::InvalidNamespace { .. })
    ));
    assert_eq!(
        build("default", "lease", ""),
        Err(ElectionBuildError::EmptyIdentity)
    );
    assert_eq!(build("default", "my-operator.example.com", "a"), Ok(()));
    let defaulted = KubeElection::builder(client.clone(), "default", "lease")
        .build()
        .unwrap();
    let other = KubeElection::builder(client, "default", "lease")
        .build()
        .unwrap();
    assert_ne!(
        defaulted.identity(),
        other.identity(),
        "default identities are unique"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_candidates_leads_and_keeps_leading_while_it_renews() {
    let (client, namespace) = setup("one-leader").await;
    let candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (winner, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    let first = lease(&client, &namespace).await;
    let spec = first.spec.clone().unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(candidates[winner].identity())
    );
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());

    // Twice the lease duration: the leader renews, nobody else wins.
    tokio::time::sleep(2 * fast().lease()).await;
    assert!(tasks.try_join_next().is_none(), "a second candidate won");
    let leaders: Vec<_> = candidates.iter().filter(|c| c.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    assert_eq!(leaders[0].token(), Some(token), "a renewal keeps the token");
    let renewed = lease(&client, &namespace).await.spec.unwrap();
    assert!(renewed.renew_time > spec.renew_time, "renewTime moves on");
    assert_eq!(renewed.acquire_time, spec.acquire_time, "acquireTime stays");
    assert_eq!(renewed.lease_transitions, Some(0));
    let leader = within("the leader's name", LIMIT, candidates[2].leader()).await;
    assert_eq!(
        leader.unwrap().as_deref(),
        Some(candidates[winner].identity())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_leader_is_followed_within_about_a_retry_period() {
    let (client, namespace) = setup("resign").await;
    let candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (first, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    let held = lease(&client, &namespace).await.spec.unwrap();

    let resigned = Instant::now();
    within("a resign", LIMIT, candidates[first].resign())
        .await
        .unwrap();
    assert!(!candidates[first].is_leader());
    within(
        "lost() after resign",
        Duration::from_millis(100),
        candidates[first].lost(),
    )
    .await;
    let bound = fast().retry_period() + Duration::from_millis(600);
    let (second, next) = next_winner(&mut tasks, "a leader after the resign", bound).await;
    eprintln!("resign to new leader: {:?}", resigned.elapsed());
    assert_ne!(first, second);
    assert!(next > token, "tokens grow: {next} after {token}");
    let taken = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(
        taken.holder_identity.as_deref(),
        Some(candidates[second].identity())
    );
    assert_eq!(taken.lease_transitions, Some(1));
    assert!(taken.acquire_time > held.acquire_time);
    // Resigning when not leading is harmless.
    within("a second resign", LIMIT, candidates[first].resign())
        .await
        .unwrap();
    assert!(candidates[second].is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_followed_within_the_lease_duration_and_a_second() {
    let (client, namespace) = setup("crash").await;
    let mut candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (first, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    // Let the standbys observe a few renewals.
    tokio::time::sleep(Duration::from_millis(800)).await;

    // The crash: every handle dropped, so the renewals are aborted; no
    // resign.
    let fencing = candidates[first].fencing();
    drop(candidates.remove(first));
    let crashed = Instant::now();
    let bound = fast().lease() + Duration::from_secs(1);
    let (_, next) = next_winner(&mut tasks, "a leader after the crash", bound).await;
    let failover = crashed.elapsed();
    eprintln!("crash to new leader: {failover:?}");
    assert!(
        failover >= fast().renew_deadline(),
        "the Lease was taken before it expired"
    );
    assert!(next > token);
    assert!(!tend::client::Fencing::is_current(&fencing, token));
    let held = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(held.lease_transitions, Some(1));
}
