//! Deleted candidate keys, late fenced writes and prefix-sharing names.

use super::*;

/// The oldest candidate key: its name and create revision.
async fn oldest_key(kv: &mut Client) -> Option<(Vec<u8>, i64)> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(
            tend::etcd::etcd_client::SortTarget::Create,
            tend::etcd::etcd_client::SortOrder::Ascend,
        )
        .with_limit(1);
    let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
    response
        .kvs()
        .first()
        .map(|kv| (kv.key().to_vec(), kv.create_revision()))
}

/// Waits until `count` candidate keys exist.
async fn candidates(kv: &mut Client, count: usize) {
    within("the candidate keys", LIMIT, async {
        loop {
            let options = GetOptions::new().with_prefix().with_count_only();
            let response = kv.get(ELECTION_PREFIX, Some(options)).await.unwrap();
            if response.count() >= count as i64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_key_is_deleted_loses_within_the_retry_period() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    within("a to win", LIMIT, a.campaign()).await.unwrap();
    let b_task = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    candidates(&mut kv, 2).await;
    // Someone deletes the leader's key while its lease lives on.
    let (key, _) = oldest_key(&mut kv).await.unwrap();
    kv.delete(key, None).await.unwrap();
    let bound = fast().retry_period() + Duration::from_millis(500);
    within("a to notice its key is gone", bound, a.lost()).await;
    assert!(!a.is_leader());
    let token_b = within("b to win", LIMIT, b_task).await.unwrap().unwrap();
    assert!(b.is_leader() && !a.is_leader(), "one leader");
    assert_eq!(
        oldest_key(&mut kv)
            .await
            .map(|(_, rev)| FencingToken::new(rev as u64)),
        Some(token_b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_every_candidate_key_leaves_one_leader_that_holds_its_key() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    let token_a = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let b_task = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    candidates(&mut kv, 2).await;
    // `etcdctl del --prefix` on the election's prefix.
    kv.delete(
        ELECTION_PREFIX,
        Some(tend::etcd::etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    let bound = fast().retry_period() + Duration::from_millis(500);
    within("a to notice its key is gone", bound, a.lost()).await;
    let token_b = within("b to win", LIMIT, b_task).await.unwrap().unwrap();
    assert!(token_b > token_a);
    assert!(b.is_leader() && !a.is_leader(), "one leader");
    // B won with a key of its own, not with its deleted one.
    assert_eq!(
        oldest_key(&mut kv)
            .await
            .map(|(_, rev)| FencingToken::new(rev as u64)),
        Some(token_b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_after_the_local_deadline_is_refused() {
    let etcd = server().await;
    let (proxy, through) = through_proxy(&etcd).await;
    let a = candidate(through, "a");
    // The writer reaches etcd directly: only the election is cut off.
    let writer = source(client(&etcd).await).client_fenced_by(&a);
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    writer
        .fenced(token)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    // The lease still lives on the server (it outlasts the renew
    // deadline), so etcd alone would accept the write.
    assert!(matches!(
        writer.fenced(token).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { token: t }) if t == token
    ));
    assert!(matches!(
        writer.fenced(token).delete(&"x".to_owned()).await,
        Err(ClientError::Fenced { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_names_that_would_share_a_prefix_are_refused() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    for name in ["a/b", "", "/"] {
        assert!(
            matches!(
                EtcdElection::builder(kv.clone(), name).build(),
                Err(ElectionBuildError::InvalidName { .. })
            ),
            "{name:?} is refused"
        );
    }
    EtcdElection::builder(kv, "a").build().unwrap();
}
