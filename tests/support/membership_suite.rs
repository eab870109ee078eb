//! One suite of membership semantics, run against every implementation
//! (`tests/shard_membership.rs` in process, `tests/etcd_membership/` on
//! etcd). Each check takes a maker of members of one fresh group of four
//! shards (group `workers`) and, for some, a fencing check of a token.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use tend::client::FencingToken;
use tend::shard::{Membership, MembershipError, Shard, ShardCount};

use super::within;

const LIMIT: Duration = Duration::from_secs(10);

pub fn four() -> ShardCount {
    ShardCount::new(4).unwrap()
}

pub fn shard(index: u32) -> Shard {
    four().shard(index).unwrap()
}

pub async fn members_see_joins_and_leaves_as_one_sorted_set<M: Membership>(
    make: impl Fn(&str) -> M,
) {
    let (b, a) = (make("b"), make("a"));
    let mut view = a.members();
    b.join().await.unwrap();
    a.join().await.unwrap();
    a.join().await.unwrap();
    within("both joined", LIMIT, view.wait_for(|m| m.len() == 2))
        .await
        .unwrap();
    let names: Vec<String> = view.borrow().iter().map(ToString::to_string).collect();
    assert_eq!(names, ["a", "b"]);
    let mut b_view = b.members();
    within(
        "b sees the same set",
        LIMIT,
        b_view.wait_for(|m| m.len() == 2),
    )
    .await
    .unwrap();
    assert_eq!(
        *b_view.borrow(),
        *view.borrow(),
        "every member sees one set"
    );
    b.leave().await.unwrap();
    within("b left", LIMIT, view.wait_for(|m| m.len() == 1))
        .await
        .unwrap();
    a.leave().await.unwrap();
    within("a left", LIMIT, view.wait_for(Vec::is_empty))
        .await
        .unwrap();
}

/// `idle`: how long b's acquire is watched not to return while a owns the
/// shard.
pub async fn a_shard_has_one_owner_and_the_next_waits_for_its_release<M: Membership>(
    make: impl Fn(&str) -> M,
    is_current: impl Fn(&M, FencingToken) -> bool,
    idle: Duration,
) {
    let (a, b) = (make("a"), make("b"));
    a.join().await.unwrap();
    b.join().await.unwrap();
    let first = a.acquire(shard(1)).await.unwrap();
    assert_eq!(
        a.acquire(shard(1)).await.unwrap(),
        first,
        "acquiring again is harmless"
    );
    assert!(is_current(&a, first));
    let waiting = b.acquire(shard(1));
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(idle, &mut waiting).await.is_err(),
        "b acquired a shard a still owns"
    );
    a.release(shard(1), FencingToken::new(first.get() + 100))
        .await
        .unwrap();
    assert!(
        is_current(&a, first),
        "a release with another token does nothing"
    );
    a.release(shard(1), first).await.unwrap();
    let second = within("b acquires the released shard", LIMIT, waiting)
        .await
        .unwrap();
    assert!(second > first);
    assert!(!is_current(&a, first) && is_current(&b, second));
}

pub async fn tokens_grow_across_shards_and_acquisitions<M: Membership>(make: impl Fn(&str) -> M) {
    let (a, b) = (make("a"), make("b"));
    a.join().await.unwrap();
    b.join().await.unwrap();
    let mut last = FencingToken::new(0);
    for (index, member) in [(0, &a), (1, &b), (2, &a), (3, &b)] {
        let token = member.acquire(shard(index)).await.unwrap();
        assert!(token > last, "token {token} of shard {index} after {last}");
        member.release(shard(index), token).await.unwrap();
        last = token;
    }
    let again = a.acquire(shard(0)).await.unwrap();
    assert!(
        again > last,
        "a new acquisition's token {again} is above {last}"
    );
}

pub async fn acquiring_needs_a_membership_and_a_shard_of_the_group<M: Membership>(
    make: impl Fn(&str) -> M,
) {
    let a = make("a");
    let error = a.acquire(shard(0)).await.unwrap_err();
    assert!(
        matches!(error, MembershipError::NotJoined { .. }),
        "{error}"
    );
    a.join().await.unwrap();
    let stranger = ShardCount::new(8).unwrap().shard(7).unwrap();
    let error = a.acquire(stranger).await.unwrap_err();
    assert_eq!(error.to_string(), "group `workers` has no shard shard-7");
    // A member that leaves while waiting gets an error, not a hang.
    let b = Arc::new(make("b"));
    b.join().await.unwrap();
    a.acquire(shard(2)).await.unwrap();
    let waiting = tokio::spawn({
        let b = Arc::clone(&b);
        async move { b.acquire(shard(2)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.leave().await.unwrap();
    let error = within("b's wait ends", LIMIT, waiting)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, MembershipError::NotJoined { .. }),
        "{error}"
    );
    assert_eq!(error.to_string(), "`b` is not a member of group `workers`");
}
