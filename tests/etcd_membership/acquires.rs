//! Acquires dropped around their answer, and records gone.

use super::*;

/// Starts an acquire of `index` and polls it until its token is won and
/// sent, without reading the answer (on this test's one thread, the take's
/// task has sent its answer by the time `owned` shows the shard).
async fn won_but_unread(
    member: &EtcdMembership,
    index: u32,
) -> (
    impl Future<Output = Result<FencingToken, MembershipError>> + '_,
    FencingToken,
) {
    let mut acquire = Box::pin(member.acquire(shard(index)));
    assert!(futures::poll!(&mut acquire).is_pending());
    let token = within("the take to win the shard", LIMIT, async {
        loop {
            let owned = member.owned().into_iter().find(|(s, _)| s.index() == index);
            if let Some((_, token)) = owned {
                break token;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    (acquire, token)
}

/// An acquire dropped once its token was won and sent, unread.
async fn drop_an_acquire_after_its_answer(member: &EtcdMembership, index: u32) -> FencingToken {
    let (acquire, token) = won_but_unread(member, index).await;
    drop(acquire);
    token
}

async fn record_revision(kv: &mut Client, key: &str) -> Option<i64> {
    let found = kv.get(key, None).await.unwrap();
    found.kvs().first().map(|kv| kv.create_revision())
}

#[tokio::test]
async fn an_acquire_dropped_after_its_token_was_sent_gives_the_shard_back() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = member(client(&etcd).await, "/orphan", "a");
    a.join().await.unwrap();
    let token = drop_an_acquire_after_its_answer(&a, 1).await;
    within("the orphaned shard to be released", LIMIT, async {
        while record_revision(&mut kv, "/orphan/shards/1").await.is_some() || !a.owned().is_empty()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(!a.is_current(token));
    // An acquire right after the drop gets a current token, whether it
    // adopts the orphan or takes the shard again after its release.
    let orphan = drop_an_acquire_after_its_answer(&a, 2).await;
    let next = within("the next acquire", LIMIT, a.acquire(shard(2)))
        .await
        .unwrap();
    for _ in 0..3 {
        record_revision(&mut kv, "/orphan/shards/2").await;
    }
    eprintln!("orphan {orphan}, next acquire {next}");
    assert_eq!(
        record_revision(&mut kv, "/orphan/shards/2").await,
        Some(i64::try_from(next.get()).unwrap())
    );
    assert!(a.is_current(next));
    let writer = source(client(&etcd).await).client_fenced_by(&a);
    writer.fenced(next).create(Item::new("x", 1)).await.unwrap();
}

#[tokio::test]
async fn an_unread_answer_dropped_never_releases_a_token_another_acquire_returned() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = member(client(&etcd).await, "/unread", "a");
    a.join().await.unwrap();
    let (unread, token) = won_but_unread(&a, 3).await;
    // A second acquire of the shard returns the same token meanwhile.
    let again = within("the second acquire", LIMIT, a.acquire(shard(3)))
        .await
        .unwrap();
    assert_eq!(again, token);
    drop(unread);
    for _ in 0..3 {
        record_revision(&mut kv, "/unread/shards/3").await;
    }
    assert_eq!(
        record_revision(&mut kv, "/unread/shards/3").await,
        Some(i64::try_from(token.get()).unwrap()),
        "the token a caller holds was released"
    );
    assert!(a.is_current(token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_with_a_shard_token_whose_record_is_gone_is_refused_by_etcd() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = member(kv.clone(), "/fence", "a");
    let writer = source(kv.clone()).client_fenced_by(&a);
    a.join().await.unwrap();
    let token = a.acquire(shard(1)).await.unwrap();
    writer
        .fenced(token)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    // Deleted behind a's back: a still believes it owns the shard, so the
    // write reaches etcd, whose compare of the record refuses it.
    kv.delete("/fence/shards/1", None).await.unwrap();
    assert!(a.is_current(token), "a cannot know yet");
    let before = kv
        .get("/test/items/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(matches!(
        writer.fenced(token).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { token: t }) if t == token
    ));
    let after = kv
        .get("/test/items/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(before.kvs().len(), after.kvs().len(), "nothing written");
    assert!(matches!(
        writer
            .fenced(FencingToken::new(token.get() + 1))
            .create(Item::new("z", 1))
            .await,
        Err(ClientError::Fenced { .. })
    ));
}
