//! The suite on etcd, dead and cut-off members, bad names.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_membership_suite_holds_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let make = |prefix: &'static str| {
        let kv = kv.clone();
        move |id: &str| member(kv.clone(), prefix, id)
    };
    membership_suite::members_see_joins_and_leaves_as_one_sorted_set(make("/suite/members")).await;
    membership_suite::a_shard_has_one_owner_and_the_next_waits_for_its_release(
        make("/suite/owner"),
        |m: &EtcdMembership, token| m.is_current(token),
        Duration::from_secs(3),
    )
    .await;
    membership_suite::tokens_grow_across_shards_and_acquisitions(make("/suite/tokens")).await;
    membership_suite::acquiring_needs_a_membership_and_a_shard_of_the_group(make("/suite/needs"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_members_shards_are_acquired_by_another_within_the_lease() {
    let etcd = server().await;
    let a = member(client(&etcd).await, "/dead", "a");
    let b = member(client(&etcd).await, "/dead", "b");
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(2)).await.unwrap();
    let waiting = tokio::spawn(async move {
        let token = b.acquire(shard(2)).await.unwrap();
        (b, token, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "b acquired a live member's shard");
    // As a crash: the renewals stop, nothing is revoked.
    let died = Instant::now();
    drop(a);
    let (b, next, acquired) = within("b takes the dead member's shard", LIMIT, waiting)
        .await
        .unwrap();
    eprintln!("b acquired {:?} after a died", acquired - died);
    assert!(next > token);
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
async fn a_member_cut_off_from_etcd_stops_owning_at_its_local_deadline() {
    let etcd = server().await;
    let (proxy, through) = through_proxy(&etcd).await;
    let a = member(through, "/cut", "a");
    let b = member(client(&etcd).await, "/cut", "b");
    // The writer reaches etcd directly: only the membership is cut off.
    let writer = source(client(&etcd).await).client_fenced_by(&a);
    a.join().await.unwrap();
    b.join().await.unwrap();
    let token = a.acquire(shard(0)).await.unwrap();
    writer
        .fenced(token)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let token = b.acquire(shard(0)).await.unwrap();
        (b, Instant::now(), token)
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cut = Instant::now();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    let a_stopped = Instant::now();
    assert!(!a.is_member() && !a.is_current(token) && a.owned().is_empty());
    assert!(matches!(
        writer.fenced(token).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { token: t }) if t == token
    ));
    let (_b, b_acquired, next) = within("b to take the shard", LIMIT, waiting).await.unwrap();
    eprintln!(
        "a stopped {:?} after the cut, b acquired {:?} after it",
        a_stopped - cut,
        b_acquired - cut
    );
    assert!(a_stopped < b_acquired, "a stopped before b owned the shard");
    assert!(a_stopped - cut <= fast().renew_deadline() + Duration::from_millis(200));
    assert!(next > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_groups_ids_and_prefixes_are_refused() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let build = |group: &str, id: &str, prefix: Option<&str>| {
        let builder = EtcdMembership::builder(kv.clone(), group, id, four());
        match prefix {
            Some(prefix) => builder.prefix(prefix).build(),
            None => builder.build(),
        }
    };
    for group in ["", "a/b"] {
        assert!(matches!(
            build(group, "m", None),
            Err(MembershipBuildError::InvalidGroup { .. })
        ));
    }
    for id in ["", "x/y"] {
        assert!(matches!(
            build("g", id, None),
            Err(MembershipBuildError::InvalidMember { .. })
        ));
    }
    for prefix in ["", "p/"] {
        let error = build("g", "m", Some(prefix)).unwrap_err();
        assert!(matches!(error, MembershipBuildError::InvalidPrefix { .. }));
    }
    assert_eq!(
        build("g", "m", Some("p/")).unwrap_err().to_string(),
        "membership prefix `p/` is empty or ends with `/`"
    );
    build("g", "m", None).unwrap();
}
