//! Conflicting and fenced writes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_detects_conflicts_and_writes_nothing() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let writer = source(kv.clone()).client();
    let created = writer.create(Item::new("a", 1)).await.unwrap();
    assert!(created.version.get() > 0);
    assert!(matches!(
        writer.create(Item::new("a", 2)).await,
        Err(ClientError::AlreadyExists { .. })
    ));
    let mut next = created.clone();
    next.value = 2;
    let updated = writer.update(next).await.unwrap();
    assert!(updated.version > created.version);
    let mut stale = created.clone();
    stale.value = 3;
    match writer.update(stale).await {
        Err(ClientError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, created.version);
            assert_eq!(actual, updated.version);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        writer.delete_at(&created.name, created.version).await,
        Err(ClientError::Conflict { .. })
    ));
    assert!(matches!(
        writer.update(Item::new("missing", 1)).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        writer.delete(&"missing".to_owned()).await,
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        writer
            .fenced(FencingToken::new(1))
            .create(Item::new("b", 1))
            .await,
        Err(ClientError::NoFencing)
    ));
    let stored = tend::Source::list(&source(kv.clone())).await.unwrap();
    assert_eq!(stored.objects.len(), 1);
    assert_eq!(stored.objects[0].value, 2, "no refused write landed");
    writer
        .delete_at(&updated.name, updated.version)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_write_from_a_deposed_leader_is_rejected() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    let writer_a = source(kv.clone()).client_fenced_by(&a);
    let writer_b = source(kv.clone()).client_fenced_by(&b);
    let token_a = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let item = writer_a
        .fenced(token_a)
        .create(Item::new("x", 1))
        .await
        .unwrap();
    // A's lease ends behind its back (an expiry while it was paused): B
    // wins; A still writes with its old token.
    let lease = leader_lease(&mut kv).await;
    kv.lease_revoke(lease).await.unwrap();
    let token_b = within("b to win", LIMIT, b.campaign()).await.unwrap();
    assert!(token_b > token_a, "tokens grow");
    let mut late = item.clone();
    late.value = 99;
    assert!(matches!(
        writer_a.fenced(token_a).update(late).await,
        Err(ClientError::Fenced { token }) if token == token_a
    ));
    assert!(matches!(
        writer_a.fenced(token_a).create(Item::new("y", 1)).await,
        Err(ClientError::Fenced { .. })
    ));
    // B's writes land.
    let mut next = item.clone();
    next.value = 2;
    writer_b.fenced(token_b).update(next).await.unwrap();
    let stored = tend::Source::list(&source(kv.clone())).await.unwrap();
    assert_eq!(stored.objects.len(), 1);
    assert_eq!(stored.objects[0].value, 2);
}
