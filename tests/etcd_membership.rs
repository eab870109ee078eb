//! The etcd membership against a real etcd on loopback: the shared suite
//! (`support/membership_suite.rs`, also run in process), a dead member's
//! shards taken over at lease expiry, a member cut off from etcd stopping
//! at its local deadline, shard tokens fencing writes in etcd itself, and
//! random runs with at most one owner per shard.

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

#[path = "support/membership_suite.rs"]
mod membership_suite;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tend::client::{ClientError, Fencing, FencingToken};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{Client, GetOptions};
use tend::etcd::{EtcdMembership, MembershipBuildError};
use tend::shard::{Membership, MembershipError};
use tokio::time::Instant;

use membership_suite::{four, shard};
use support::{Item, client, server, source, through_proxy, within};

const LIMIT: Duration = Duration::from_secs(10);

/// Short timings: lease 2 s (etcd's minimum), renew deadline 1.5 s, retry
/// period 0.5 s.
fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn member(client: Client, prefix: &str, id: &str) -> EtcdMembership {
    EtcdMembership::builder(client, "workers", id, four())
        .prefix(prefix)
        .config(fast())
        .build()
        .expect("a valid member")
}

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

/// One step of a random run.
#[derive(Debug, Clone)]
enum Step {
    Join(usize),
    Leave(usize),
    Acquire(usize, u32),
    Release(usize, u32),
}

fn step() -> impl Strategy<Value = Step> {
    let member = 0..3usize;
    let shard = 0..4u32;
    prop_oneof![
        member.clone().prop_map(Step::Join),
        member.clone().prop_map(Step::Leave),
        (member.clone(), shard.clone()).prop_map(|(m, s)| Step::Acquire(m, s)),
        (member, shard).prop_map(|(m, s)| Step::Release(m, s)),
    ]
}

/// Random join/leave/acquire/release runs: each shard has at most one
/// owner (among the members' own views and in etcd), the one a model says.
#[test]
fn random_runs_keep_at_most_one_owner_per_shard() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let etcd = runtime.block_on(server());
    let kv = runtime.block_on(client(&etcd));
    let mut runner = TestRunner::new(Config {
        cases: 3,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    runner
        .run(&prop::collection::vec(step(), 30), |steps| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let prefix = format!("/random/{n}");
            runtime.block_on(run_case(kv.clone(), &prefix, steps))
        })
        .unwrap();
}

async fn run_case(kv: Client, prefix: &str, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let ids = ["a", "b", "c"];
    let members: Vec<_> = ids
        .iter()
        .map(|id| member(kv.clone(), prefix, id))
        .collect();
    let mut live = [false; 3];
    let mut owners: BTreeMap<u32, (usize, FencingToken)> = BTreeMap::new();
    for step in steps {
        match step {
            Step::Join(m) => {
                members[m].join().await.unwrap();
                live[m] = true;
            }
            Step::Leave(m) => {
                members[m].leave().await.unwrap();
                live[m] = false;
                owners.retain(|_, (owner, _)| *owner != m);
            }
            Step::Acquire(m, s) => match (live[m], owners.get(&s).copied()) {
                (false, _) => prop_assert!(members[m].acquire(shard(s)).await.is_err()),
                (true, Some((owner, token))) if owner == m => {
                    prop_assert_eq!(members[m].acquire(shard(s)).await.unwrap(), token);
                }
                // Would wait for the owner: not taken.
                (true, Some(_)) => {
                    let waited = tokio::time::timeout(
                        Duration::from_millis(100),
                        members[m].acquire(shard(s)),
                    );
                    prop_assert!(waited.await.is_err(), "acquired an owned shard");
                }
                (true, None) => {
                    let token = within("a free shard", LIMIT, members[m].acquire(shard(s)))
                        .await
                        .unwrap();
                    prop_assert!(owners.values().all(|&(_, t)| t < token));
                    owners.insert(s, (m, token));
                }
            },
            Step::Release(m, s) => {
                let token = owners.get(&s).filter(|(o, _)| *o == m).map(|&(_, t)| t);
                members[m]
                    .release(shard(s), token.unwrap_or(FencingToken::new(1)))
                    .await
                    .unwrap();
                if token.is_some() {
                    owners.remove(&s);
                }
            }
        }
        check_owners(&kv, prefix, &members, &owners).await?;
    }
    for member in &members {
        member.leave().await.unwrap();
    }
    Ok(())
}

/// Every shard's owner, in the members' views and in etcd, is the model's.
async fn check_owners(
    kv: &Client,
    prefix: &str,
    members: &[EtcdMembership],
    owners: &BTreeMap<u32, (usize, FencingToken)>,
) -> Result<(), TestCaseError> {
    let mut seen: BTreeMap<u32, (usize, FencingToken)> = BTreeMap::new();
    for (m, member) in members.iter().enumerate() {
        for (shard, token) in member.owned() {
            let earlier = seen.insert(shard.index(), (m, token));
            prop_assert!(earlier.is_none(), "two owners of {}", shard);
        }
    }
    prop_assert_eq!(&seen, owners);
    let records = kv
        .clone()
        .get(
            format!("{prefix}/shards/"),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let stored: BTreeMap<u32, FencingToken> = records
        .kvs()
        .iter()
        .map(|kv| {
            let key = kv.key_str().unwrap();
            let index = key.rsplit('/').next().unwrap().parse().unwrap();
            (
                index,
                FencingToken::new(u64::try_from(kv.create_revision()).unwrap()),
            )
        })
        .collect();
    let expected: BTreeMap<u32, FencingToken> = owners.iter().map(|(&s, &(_, t))| (s, t)).collect();
    prop_assert_eq!(stored, expected);
    Ok(())
}
