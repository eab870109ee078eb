//! Random runs: at most one owner per shard.

use super::*;

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
