//! Sharding's pure parts: the stable key → shard hash and the rendezvous
//! assignment of shards to members, with bounded loads.

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
    // Bounded loads: 4 shards each (plain rendezvous gave 5, 4 and 3).
    assert_eq!(owners, "112102002021");
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

/// The most shards one of `members` members may own: the mean's ceiling.
fn room(shards: ShardCount, members: usize) -> usize {
    (shards.get() as usize).div_ceil(members)
}

/// The most shards a join or a leave may move besides the joiner's or the
/// leaver's share: shards move between the others as their room changes.
fn extra_moves(shards: ShardCount) -> usize {
    2 * (f64::from(shards.get()).sqrt().ceil() as usize) + 2
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
        let room = room(shards, distinct(&members));
        for member in assignment.members() {
            let share = assignment.shards_of(member.as_str()).count();
            prop_assert!(share <= room, "{} owns {} shards, over the room of {}", member, share, room);
        }
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
    fn a_join_moves_its_share_and_few_others(
        members in members(),
        joiner in "[a-p]{1,3}",
        shards in count(),
    ) {
        prop_assume!(!members.contains(&joiner));
        let before = Assignment::compute(members.iter().cloned(), shards);
        let after = Assignment::compute(members.iter().cloned().chain([joiner.clone()]), shards);
        let moved: Vec<_> = before.moved(&after).collect();
        let share = after.shards_of(&joiner).count();
        prop_assert!(share <= room(shards, distinct(&members) + 1));
        prop_assert!(moved.len() >= share, "every shard of the joiner moved");
        prop_assert!(
            moved.len() <= share + extra_moves(shards),
            "{} shards moved for a share of {}", moved.len(), share
        );
    }

    #[test]
    fn a_leave_moves_its_share_and_few_others(
        members in members(),
        leaver in any::<prop::sample::Index>(),
        shards in count(),
    ) {
        prop_assume!(distinct(&members) > 1);
        let leaver = leaver.get(&members).clone();
        let before = Assignment::compute(members.iter().cloned(), shards);
        let after = Assignment::compute(members.iter().filter(|m| **m != leaver).cloned(), shards);
        let moved: Vec<_> = before.moved(&after).collect();
        let share = before.shards_of(&leaver).count();
        prop_assert!(moved.len() >= share, "every shard of the leaver moved");
        prop_assert!(
            moved.len() <= share + extra_moves(shards),
            "{} shards moved for a share of {}", moved.len(), share
        );
    }

    #[test]
    fn every_key_lands_in_a_shard_below_the_count(key in ".*", shards in 1u32..=ShardCount::MAX) {
        let shards = ShardCount::new(shards).unwrap();
        prop_assert!(shards.shard_of(&key).index() < shards.get());
    }
}

/// Bounded loads balance shares exactly: over many memberships of three,
/// 256 shards give each member 85 or 86 (plain rendezvous: 85 ± 8).
#[test]
fn shares_are_balanced() {
    for round in 0..200 {
        let members: Vec<String> = (0..3).map(|i| format!("replica-{round}-{i}")).collect();
        let assignment = Assignment::compute(members.iter().cloned(), ShardCount::DEFAULT);
        for member in &members {
            let share = assignment.shards_of(member).count();
            assert!((84..=86).contains(&share), "{member} owns {share} of 256");
        }
    }
}
