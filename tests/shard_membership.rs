//! The in-process membership: the live set, one owner per shard, tokens
//! that fence a memory backend, expiry.

#[path = "support/client_suite.rs"]
mod suite;

#[path = "support/wait.rs"]
mod support;

#[path = "support/membership_suite.rs"]
mod membership_suite;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use tend::client::{ClientError, Fences, FencingToken};
use tend::memory::{MemoryMembership, MemoryMembershipGroup, MemoryStore};
use tend::shard::{Membership, MembershipError, Shard, ShardCount};

use suite::item;
use support::within;

/// Whether `token` is a shard's current token in `group`, read from the
/// owners the group reports.
fn is_current(group: &MemoryMembershipGroup, token: FencingToken) -> bool {
    group
        .shard_count()
        .shards()
        .any(|shard| group.owner(shard).is_some_and(|(_, owned)| owned == token))
}

const LIMIT: Duration = Duration::from_secs(5);

fn four() -> ShardCount {
    ShardCount::new(4).unwrap()
}

fn shard(index: u32) -> Shard {
    four().shard(index).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_membership_suite_holds_in_process() {
    let group = MemoryMembershipGroup::new("workers", four());
    membership_suite::members_see_joins_and_leaves_as_one_sorted_set(|id| group.member(id)).await;
    let group = MemoryMembershipGroup::new("workers", four());
    let current = |member: &MemoryMembership, token| member.fencing().is_current(token);
    membership_suite::a_shard_has_one_owner_and_the_next_waits_for_its_release(
        |id| group.member(id),
        current,
        Duration::from_secs(60),
    )
    .await;
    let group = MemoryMembershipGroup::new("workers", four());
    membership_suite::tokens_grow_across_shards_and_acquisitions(|id| group.member(id)).await;
    let group = MemoryMembershipGroup::new("workers", four());
    membership_suite::acquiring_needs_a_membership_and_a_shard_of_the_group(|id| group.member(id))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_member_leaves() {
    let group = MemoryMembershipGroup::new("workers", four());
    let a = group.member("a");
    let mut view = a.members();
    a.join().await.unwrap();
    within("a joined", LIMIT, view.wait_for(|m| m.len() == 1))
        .await
        .unwrap();
    drop(a);
    within("a dropped", LIMIT, view.wait_for(Vec::is_empty))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_shard_has_one_owner_and_the_next_waits_for_its_release() {
    let group = MemoryMembershipGroup::new("workers", four());
    let (a, b) = (group.member("a"), group.member("b"));
    a.join().await.unwrap();
    b.join().await.unwrap();
    let first = a.acquire(shard(1)).await.unwrap();
    assert_eq!(
        a.acquire(shard(1)).await.unwrap(),
        first,
        "acquiring again is harmless"
    );
    assert_eq!(b.try_acquire(shard(1)).unwrap(), None);
    let waiting = b.acquire(shard(1));
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_secs(60), &mut waiting)
            .await
            .is_err(),
        "b acquired a shard a still owns"
    );
    a.release(shard(1), FencingToken::new(first.get() + 100))
        .await
        .unwrap();
    assert_eq!(
        group.owner(shard(1)).map(|(m, _)| m.to_string()),
        Some("a".into()),
        "a release with another token does nothing"
    );
    a.release(shard(1), first).await.unwrap();
    let second = within("b acquires the released shard", LIMIT, waiting)
        .await
        .unwrap();
    assert!(second > first);
    assert!(!is_current(&group, first) && is_current(&group, second));
    assert_eq!(b.owned(), [(shard(1), second)]);
    assert!(a.owned().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_expired_member_loses_its_shards_and_its_tokens() {
    let group = MemoryMembershipGroup::new("workers", four());
    let (a, b) = (group.member("a"), group.member("b"));
    a.join().await.unwrap();
    b.join().await.unwrap();
    let tokens = [
        a.acquire(shard(0)).await.unwrap(),
        a.acquire(shard(3)).await.unwrap(),
    ];
    let waiting = tokio::spawn(async move {
        let token = b.acquire(shard(3)).await.unwrap();
        (b, token)
    });
    group.expire("a");
    within("a observes the loss", LIMIT, a.lost()).await;
    let (b, token) = within("b takes the freed shard", LIMIT, waiting)
        .await
        .unwrap();
    assert!(tokens.iter().all(|&t| !is_current(&group, t)));
    assert!(is_current(&group, token) && token > tokens[1]);
    assert!(group.owner(shard(0)).is_none());
    let refused = a.try_acquire(shard(0)).unwrap_err();
    assert!(matches!(refused, MembershipError::NotJoined { .. }));
    assert_eq!(
        refused.to_string(),
        "`a` is not a member of group `workers`"
    );
    drop(b);
    assert!(
        !is_current(&group, token),
        "a dropped member's tokens are stale"
    );
}

#[tokio::test(start_paused = true)]
async fn a_write_with_a_released_shards_token_is_fenced_and_changes_nothing() {
    let group = MemoryMembershipGroup::new("workers", four());
    let store = MemoryStore::new("items");
    let a = group.member("a");
    a.join().await.unwrap();
    let token = a.acquire(shard(0)).await.unwrap();
    let client = store.client_fenced_by(&a).fenced(token);
    client.create(item("x", 1)).await.unwrap();
    a.release(shard(0), token).await.unwrap();
    let revision = store.revision();
    let error = client.create(item("y", 1)).await.unwrap_err();
    assert!(matches!(error, ClientError::Fenced { token: t } if t == token));
    assert_eq!(
        store.revision(),
        revision,
        "a refused write takes no revision"
    );
}

/// One step of a random run against the group.
#[derive(Debug, Clone)]
enum Step {
    Join(usize),
    Leave(usize),
    Expire(usize),
    Acquire(usize, u32),
    Release(usize, u32),
}

fn step() -> impl Strategy<Value = Step> {
    let member = 0..3usize;
    let shard = 0..4u32;
    prop_oneof![
        member.clone().prop_map(Step::Join),
        member.clone().prop_map(Step::Leave),
        member.clone().prop_map(Step::Expire),
        (member.clone(), shard.clone()).prop_map(|(m, s)| Step::Acquire(m, s)),
        (member, shard).prop_map(|(m, s)| Step::Release(m, s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Against a model: each shard has at most one owner, the one the model
    /// says; a token is current exactly while its shard is owned with it;
    /// every new token is greater than all before.
    #[test]
    fn ownership_and_tokens_follow_the_model(steps in prop::collection::vec(step(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let group = MemoryMembershipGroup::new("model", four());
            let members: Vec<_> = ["a", "b", "c"].iter().map(|id| group.member(*id)).collect();
            let mut live = [false; 3];
            let mut owners: BTreeMap<u32, (usize, FencingToken)> = BTreeMap::new();
            let mut issued: Vec<FencingToken> = Vec::new();
            for step in steps {
                match step {
                    Step::Join(m) => {
                        members[m].join().await.unwrap();
                        live[m] = true;
                    }
                    Step::Leave(m) | Step::Expire(m) => {
                        if matches!(step, Step::Leave(_)) {
                            members[m].leave().await.unwrap();
                        } else {
                            group.expire(["a", "b", "c"][m]);
                        }
                        live[m] = false;
                        owners.retain(|_, (owner, _)| *owner != m);
                    }
                    Step::Acquire(m, s) => {
                        let got = members[m].try_acquire(shard(s));
                        match (live[m], owners.get(&s).copied()) {
                            (false, _) => prop_assert!(got.is_err()),
                            (true, Some((owner, token))) if owner == m => prop_assert_eq!(got.unwrap(), Some(token)),
                            (true, Some(_)) => prop_assert_eq!(got.unwrap(), None),
                            (true, None) => {
                                let token = got.unwrap().unwrap();
                                prop_assert!(issued.iter().all(|&t| t < token));
                                issued.push(token);
                                owners.insert(s, (m, token));
                            }
                        }
                    }
                    Step::Release(m, s) => {
                        let token = owners.get(&s).filter(|(o, _)| *o == m).map(|&(_, t)| t);
                        members[m].release(shard(s), token.unwrap_or(FencingToken::new(0))).await.unwrap();
                        if token.is_some() {
                            owners.remove(&s);
                        }
                    }
                }
                for s in 0..4 {
                    let owner = group.owner(shard(s)).map(|(id, token)| (id.to_string(), token));
                    let expected = owners.get(&s).map(|&(m, t)| (["a", "b", "c"][m].to_owned(), t));
                    prop_assert_eq!(owner, expected);
                }
                for &token in &issued {
                    let current = owners.values().any(|&(_, t)| t == token);
                    prop_assert_eq!(is_current(&group, token), current);
                }
            }
            Ok(())
        })?;
    }
}
