//! Sharding's pure parts: the stable key → shard hash and the rendezvous
//! assignment of shards to members.

use std::collections::BTreeSet;

use proptest::prelude::*;
use tend::ObjectKey;
use tend::shard::{Assignment, ShardCount, ShardKey, StableHasher};

/// Values computed once (and by an independent reimplementation of FNV-1a +
/// fmix64): a change here moves keys between shards across versions.
#[test]
fn hashes_and_shards_are_pinned_across_versions() {
    let mut hasher = StableHasher::new();
    hasher.write_str("web-1");
    assert_eq!(hasher.finish(), 0xcdde_3c6a_3e56_b22a);
    assert_eq!("web-1".stable_hash(), 0xcdde_3c6a_3e56_b22a);
    assert_eq!(String::from("web-1").stable_hash(), 0xcdde_3c6a_3e56_b22a);
    assert_eq!(
        ObjectKey::new("default", "web-1").stable_hash(),
        0xba4f_ea77_e369_13cf
    );
    assert_eq!(42u64.stable_hash(), 0xa624_5a5d_cf27_8758);
    assert_eq!((-1i32).stable_hash(), 0x6a92_c022_8678_c02e);
    let shards: Vec<u32> = ["web-0", "web-1", "web-2", "db-0"]
        .iter()
        .map(|key| ShardCount::DEFAULT.shard_of(key).index())
        .collect();
    assert_eq!(shards, [247, 205, 73, 14]);
    let twelve = ShardCount::new(12).unwrap();
    let assignment = Assignment::compute(["replica-0", "replica-1", "replica-2"], twelve);
    let owners: String = twelve
        .shards()
        .map(|shard| {
            assignment
                .owner(shard)
                .unwrap()
                .as_str()
                .chars()
                .last()
                .unwrap()
        })
        .collect();
    assert_eq!(owners, "112102100021");
}

#[test]
fn integers_hash_alike_whatever_their_width() {
    assert_eq!(3u8.stable_hash(), 3u64.stable_hash());
    assert_eq!(3usize.stable_hash(), 3u32.stable_hash());
    assert_eq!((-3i8).stable_hash(), (-3i64).stable_hash());
    // Strings are length-prefixed: moving a byte between parts changes the hash.
    assert_ne!(("ab", "c").stable_hash(), ("a", "bc").stable_hash());
}

#[test]
fn a_shard_count_is_between_one_and_the_maximum() {
    assert_eq!(ShardCount::new(0).unwrap_err().count, 0);
    assert!(ShardCount::new(ShardCount::MAX + 1).is_err());
    assert!(ShardCount::new(u32::MAX).is_err());
    assert_eq!(
        ShardCount::new(ShardCount::MAX).unwrap().get(),
        ShardCount::MAX
    );
    assert_eq!(ShardCount::default().get(), 256);
    assert_eq!(
        ShardCount::new(0).unwrap_err().to_string(),
        "a shard count must be between 1 and 65536, not 0"
    );
    let one = ShardCount::new(1).unwrap();
    assert_eq!(one.shard_of("anything").index(), 0);
    assert!(one.shard(1).is_none());
}

#[test]
fn without_members_no_shard_has_an_owner() {
    let assignment = Assignment::compute(Vec::<String>::new(), ShardCount::DEFAULT);
    assert!(
        ShardCount::DEFAULT
            .shards()
            .all(|s| assignment.owner(s).is_none())
    );
    assert_eq!(assignment.owner_of("web-1"), None);
}

#[test]
fn a_shard_of_another_count_has_no_owner_and_every_shard_moves() {
    let small = ShardCount::new(4).unwrap();
    let large = ShardCount::new(8).unwrap();
    let assignment = Assignment::compute(["a"], small);
    assert!(assignment.owner(large.shard(7).unwrap()).is_none());
    let other = Assignment::compute(["a"], large);
    assert_eq!(assignment.moved(&other).count(), 4);
}

/// Up to 12 members named from a small alphabet (so that joins and leaves
/// of the same names recur), 1 to 2048 shards.
fn members() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-p]{1,3}", 1..12)
}

fn count() -> impl Strategy<Value = ShardCount> {
    (1u32..=2048).prop_map(|n| ShardCount::new(n).unwrap())
}

fn distinct(members: &[String]) -> usize {
    members.iter().collect::<BTreeSet<_>>().len()
}

/// The most shards one member of `members` may get with overwhelming
/// probability: the mean plus six standard deviations of its binomial share
/// (a rendezvous share is random, see `Assignment`), plus one.
fn share_bound(shards: ShardCount, members: usize) -> usize {
    let n = shards.get() as f64;
    let p = 1.0 / members as f64;
    ((n * p).ceil() + 6.0 * (n * p * (1.0 - p)).sqrt() + 1.0) as usize
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_shard_has_exactly_one_owner_among_the_members(members in members(), shards in count()) {
        let assignment = Assignment::compute(members.iter().cloned(), shards);
        let mut owned = 0;
        for member in assignment.members() {
            let mine: Vec<_> = assignment.shards_of(member.as_str()).collect();
            prop_assert!(mine.iter().all(|&s| assignment.owner(s) == Some(member)));
            owned += mine.len();
        }
        prop_assert_eq!(owned, shards.get() as usize, "the members' shards partition the shards");
        for shard in shards.shards() {
            let owner = assignment.owner(shard);
            prop_assert!(owner.is_some_and(|o| members.iter().any(|m| m == o.as_str())));
        }
    }

    #[test]
    fn the_same_membership_in_any_order_gives_the_same_assignment(
        members in members(),
        shards in count(),
        seed in any::<u64>(),
    ) {
        let mut shuffled = members.clone();
        // A deterministic shuffle, plus a duplicate.
        shuffled.sort_by_key(|m| m.stable_hash() ^ seed);
        shuffled.push(members[0].clone());
        let a = Assignment::compute(members, shards);
        let b = Assignment::compute(shuffled, shards);
        prop_assert_eq!(a.moved(&b).count(), 0);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn a_join_moves_only_the_joiners_share(
        members in members(),
        joiner in "[a-p]{1,3}",
        shards in count(),
    ) {
        prop_assume!(!members.contains(&joiner));
        let before = Assignment::compute(members.iter().cloned(), shards);
        let after = Assignment::compute(members.iter().cloned().chain([joiner.clone()]), shards);
        let moved: Vec<_> = before.moved(&after).collect();
        prop_assert!(moved.iter().all(|&s| after.owner(s).is_some_and(|o| o.as_str() == joiner)));
        prop_assert_eq!(moved.len(), after.shards_of(&joiner).count());
        prop_assert!(moved.len() <= share_bound(shards, distinct(&members) + 1));
    }

    #[test]
    fn a_leave_moves_only_the_leavers_shards(
        members in members(),
        leaver in any::<prop::sample::Index>(),
        shards in count(),
    ) {
        prop_assume!(distinct(&members) > 1);
        let leaver = leaver.get(&members).clone();
        let before = Assignment::compute(members.iter().cloned(), shards);
        let after = Assignment::compute(members.iter().filter(|m| **m != leaver).cloned(), shards);
        let moved: Vec<_> = before.moved(&after).collect();
        prop_assert!(moved.iter().all(|&s| before.owner(s).is_some_and(|o| o.as_str() == leaver)));
        prop_assert_eq!(moved.len(), before.shards_of(&leaver).count());
        prop_assert!(moved.len() <= share_bound(shards, distinct(&members)));
    }

    #[test]
    fn every_key_lands_in_a_shard_below_the_count(key in ".*", shards in 1u32..=ShardCount::MAX) {
        let shards = ShardCount::new(shards).unwrap();
        prop_assert!(shards.shard_of(&key).index() < shards.get());
    }
}

/// Rendezvous spreads shards evenly enough: over many memberships of three,
/// 256 shards give each member 85 ± 8 on average, never under half or over
/// one and a half times the mean.
#[test]
fn shares_stay_near_the_mean() {
    for round in 0..200 {
        let members: Vec<String> = (0..3).map(|i| format!("replica-{round}-{i}")).collect();
        let assignment = Assignment::compute(members.iter().cloned(), ShardCount::DEFAULT);
        for member in &members {
            let share = assignment.shards_of(member).count();
            assert!((43..=128).contains(&share), "{member} owns {share} of 256");
        }
    }
}
