//! The suite on the API server, a dead member, a clean leave, bad names.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tend::kube::MembershipBuildError;
use tend::shard::Membership;
use tokio::time::Instant;

use super::*;
use membership_suite::shard;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_membership_suite_holds_on_the_api_server() {
    let make = |client: kube::Client, namespace: String| {
        move |id: &str| member(client.clone(), &namespace, id)
    };
    let (client, ns) = setup("suite-members").await;
    membership_suite::members_see_joins_and_leaves_as_one_sorted_set(make(client, ns)).await;
    let (client, ns) = setup("suite-owner").await;
    membership_suite::a_shard_has_one_owner_and_the_next_waits_for_its_release(
        make(client, ns),
        |m: &KubeMembership, token| m.is_current(token),
        Duration::from_secs(3),
    )
    .await;
    let (client, ns) = setup("suite-tokens").await;
    membership_suite::tokens_grow_across_shards_and_acquisitions(make(client, ns)).await;
    let (client, ns) = setup("suite-needs").await;
    membership_suite::acquiring_needs_a_membership_and_a_shard_of_the_group(make(client, ns)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_members_shards_are_acquired_by_another_once_its_lease_expired() {
    let (client, ns) = setup("dead").await;
    let a = member(client.clone(), &ns, "a");
    let b = member(client.clone(), &ns, "b");
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(2)).await.unwrap();
    let waiting = tokio::spawn(async move {
        let token = b.acquire(shard(2)).await.unwrap();
        (b, token, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b acquired a live member's shard");
    // As a crash: the renewals stop, nothing is released.
    let died = Instant::now();
    drop(a);
    let (b, next, acquired) = within("b takes the dead member's shard", LIMIT, waiting)
        .await
        .unwrap();
    eprintln!("b acquired {:?} after a died", acquired - died);
    assert!(next > token);
    assert!(
        acquired - died >= fast().renew_deadline(),
        "not before a's deadline"
    );
    assert!(acquired - died <= fast().lease() + Duration::from_secs(1));
    let mut view = b.members();
    within(
        "a leaves the live set",
        LIMIT,
        view.wait_for(|m| m.len() == 1),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_releases_its_shards_at_once_and_deletes_its_lease() {
    let (client, ns) = setup("leave").await;
    let a = member(client.clone(), &ns, "a");
    let b = member(client.clone(), &ns, "b");
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(3)).await.unwrap();
    let waiting = tokio::spawn(async move { b.acquire(shard(3)).await.map(|t| (b, t)) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = Instant::now();
    a.leave().await.unwrap();
    let (b, next) = within("b takes the shard a left", LIMIT, waiting)
        .await
        .unwrap()
        .unwrap();
    eprintln!("b acquired {:?} after a left", left.elapsed());
    assert!(
        left.elapsed() < fast().renew_deadline(),
        "without waiting for expiry"
    );
    assert!(next > token && !a.is_current(token) && b.is_current(next));
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    let gone = leases.get_opt("workers-member-a").await.unwrap();
    assert!(gone.is_none(), "a's member Lease is deleted");
    a.join().await.unwrap();
    assert!(a.is_member(), "a joins again at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_the_api_server_would_refuse_are_refused_when_building() {
    let (client, ns) = setup("names").await;
    let build = |ns: &str, group: &str, id: &str| {
        KubeMembership::builder(client.clone(), ns, group, id, four()).build()
    };
    assert!(matches!(
        build(&ns, "Workers", "a"),
        Err(MembershipBuildError::InvalidGroup { .. })
    ));
    assert!(matches!(
        build(&ns, "workers", "A_1"),
        Err(MembershipBuildError::InvalidMember { .. })
    ));
    assert!(matches!(
        build(&ns, "workers", &"a".repeat(250)),
        Err(MembershipBuildError::InvalidMember { .. })
    ));
    assert!(matches!(
        build("Bad.Namespace", "workers", "a"),
        Err(MembershipBuildError::InvalidNamespace { .. })
    ));
    assert!(build(&ns, "workers", "replica-0.shop").is_ok());
}
