//! Caches scoped to a replica's shards (`Sharding::cache_scope`): each
//! replica caches only its shards' objects, and gains a shard only once
//! its objects are cached.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use tend::{Event, Revision, Snapshot, Source, SourceError, WatchStream, async_trait};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::*;
use crate::looks::{self, Looker, Looks, every_reconcile_saw_its_object};

/// One replica: a scoped informer (stopped apart), its sharding and its
/// sharded controller.
struct Scoped {
    informer: Informer<Widget>,
    sharding: Sharding,
    stop: CancellationToken,
    informer_stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Scoped {
    fn informer(source: impl Source<Object = Widget>, sharding: &Sharding) -> Informer<Widget> {
        Informer::builder(source)
            .scope(sharding.cache_scope())
            .build()
            .expect("valid")
    }

    /// Runs `informer`; the sharding and the controller start with `join`.
    fn start(informer: Informer<Widget>, sharding: Sharding) -> Self {
        let informer_stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn({
            let (informer, stop) = (informer.clone(), informer_stop.clone());
            async move { informer.run(stop).await.expect("ran") }
        });
        Self {
            informer,
            sharding,
            stop: CancellationToken::new(),
            informer_stop,
            tasks,
        }
    }

    fn join(&mut self, replica: &'static str, looks: &Looks) {
        let looker = Looker {
            replica,
            looks: Arc::clone(looks),
        };
        let controller = Controller::builder(replica, &self.informer, looker)
            .build()
            .expect("valid");
        let env = Environment::new(self.stop.clone()).ownership(self.sharding.ownership());
        self.tasks
            .spawn(async move { controller.run_in(env).await.expect("ran") });
        let (sharding, stop) = (self.sharding.clone(), self.stop.clone());
        self.tasks
            .spawn(async move { sharding.run(stop).await.expect("ran") });
    }

    fn cached(&self) -> BTreeSet<String> {
        let cache = self.informer.cache();
        cache.list().iter().map(|w| w.name.clone()).collect()
    }

    async fn stop(mut self) {
        self.stop.cancel();
        self.informer_stop.cancel();
        while let Some(ended) = within("a task to stop", LIMIT, self.tasks.join_next()).await {
            ended.expect("not panicked");
        }
    }
}

fn sharding(group: &MemoryMembershipGroup, replica: &str) -> Sharding {
    Sharding::new(group.member(replica), group.shard_count())
        .handover_timeout(Duration::from_secs(1))
}

/// The keys of the shards `member` owns.
fn owned_keys(group: &MemoryMembershipGroup, keys: &[String], member: &str) -> BTreeSet<String> {
    let count = group.shard_count();
    let owner = |key: &String| group.owner(count.shard_of(key)).map(|(owner, _)| owner);
    keys.iter()
        .filter(|key| owner(key).is_some_and(|owner| owner.as_str() == member))
        .cloned()
        .collect()
}

/// Whether every key in `keys` was reconciled on its owner at or after
/// entry `from` of the log.
fn reconciled_by_owners(
    group: &MemoryMembershipGroup,
    looks: &Looks,
    keys: &[String],
    from: usize,
) -> bool {
    let count = group.shard_count();
    let owner = |key: &str| {
        let (owner, _) = group.owner(count.shard_of(key))?;
        Some(owner.as_str().to_owned())
    };
    looks::reconciled_by_owners(looks, keys, owner, from)
}

#[tokio::test(start_paused = true)]
async fn scoped_caches_hold_only_the_shards_owned_and_follow_a_handover() {
    let keys = names(300);
    let store = store_of(300);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(12).expect("valid"));
    let looks = Looks::default();
    let mut replicas: Vec<(&str, Scoped)> = ["r0", "r1", "r2"]
        .into_iter()
        .map(|replica| {
            let sharding = sharding(&group, replica);
            let informer = Scoped::informer(store.clone(), &sharding);
            let mut scoped = Scoped::start(informer, sharding);
            scoped.join(replica, &looks);
            (replica, scoped)
        })
        .collect();
    let deleted = Arc::new(AtomicUsize::new(0));
    let _deletions = replicas[2].1.informer.subscribe(deletions(&deleted));
    let caches_match = |replicas: &[(&str, Scoped)]| {
        replicas
            .iter()
            .all(|(replica, scoped)| scoped.cached() == owned_keys(&group, &keys, replica))
    };
    eventually(
        "three shares, each cached alone, every key reconciled",
        LIMIT,
        || {
            let shares = ["r0", "r1", "r2"].map(|r| owned_keys(&group, &keys, r).len());
            shares.iter().sum::<usize>() == 300
                && shares.iter().all(|&share| share > 0 && share < 300)
                && caches_match(&replicas)
                && reconciled_by_owners(&group, &looks, &keys, 0)
        },
    )
    .await;
    let (_, leaving) = replicas.pop().expect("three");
    let moved: Vec<String> = owned_keys(&group, &keys, "r2").into_iter().collect();
    let from = looks.lock().len();
    leaving.stop.cancel();
    eventually(
        "r2's shards owned by the others, cached and reconciled there",
        LIMIT,
        || {
            let shares = ["r0", "r1"].map(|r| owned_keys(&group, &keys, r).len());
            shares.iter().sum::<usize>() == 300
                && caches_match(&replicas)
                && reconciled_by_owners(&group, &looks, &moved, from)
        },
    )
    .await;
    eventually("the leaving replica's cache emptied", LIMIT, || {
        leaving.cached().is_empty()
    })
    .await;
    assert_eq!(deleted.load(Ordering::Relaxed), 0, "dropped, not deleted");
    every_reconcile_saw_its_object(&looks);
    leaving.stop().await;
    for (_, scoped) in replicas {
        scoped.stop().await;
    }
}

/// A handler counting deletions into `deleted`.
fn deletions(deleted: &Arc<AtomicUsize>) -> impl Fn(&Event<Widget>) + Send + Sync + 'static {
    let deleted = Arc::clone(deleted);
    move |event| {
        if matches!(event, Event::Deleted(_)) {
            deleted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The store, each list after the first waiting for a permit.
struct Gated {
    store: MemoryStore<Widget>,
    lists: AtomicUsize,
    permits: Arc<Semaphore>,
}

#[async_trait]
impl Source for Gated {
    type Object = Widget;

    fn name(&self) -> &str {
        "gated"
    }

    async fn list(&self) -> Result<Snapshot<Widget>, SourceError> {
        if self.lists.fetch_add(1, Ordering::AcqRel) > 0 {
            self.permits.acquire().await.expect("open").forget();
        }
        self.store.list().await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<Widget>, SourceError> {
        self.store.watch(from).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_shard_is_gained_only_once_its_objects_are_cached() {
    let keys = names(50);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(4).expect("valid"));
    let permits = Arc::new(Semaphore::new(0));
    let gated = Gated {
        store: store_of(50),
        lists: AtomicUsize::new(0),
        permits: Arc::clone(&permits),
    };
    let sharding = sharding(&group, "r0");
    let mut scoped = Scoped::start(Scoped::informer(gated, &sharding), sharding);
    let informer = scoped.informer.clone();
    within("the first list", LIMIT, informer.wait_synced(LIMIT))
        .await
        .expect("synced");
    assert!(scoped.cached().is_empty(), "no shard kept before joining");
    let looks = Looks::default();
    scoped.join("r0", &looks);
    eventually("every shard acquired in the group", LIMIT, || {
        owned_keys(&group, &keys, "r0").len() == 50
    })
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        !scoped.sharding.owns_any(),
        "not gained while its list waits"
    );
    assert!(looks.lock().is_empty(), "nothing reconciled");
    permits.add_permits(Semaphore::MAX_PERMITS / 2);
    eventually("gained and reconciled once listed", LIMIT, || {
        scoped.sharding.owns_any() && reconciled_by_owners(&group, &looks, &keys, 0)
    })
    .await;
    assert_eq!(scoped.cached().len(), 50);
    every_reconcile_saw_its_object(&looks);
    scoped.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_shard_moved_away_while_its_objects_are_listed_is_released_at_once() {
    let keys = names(60);
    let store = store_of(60);
    let group = MemoryMembershipGroup::new("widgets", ShardCount::new(4).expect("valid"));
    let permits = Arc::new(Semaphore::new(0));
    let gated = Gated {
        store: store.clone(),
        lists: AtomicUsize::new(0),
        permits: Arc::clone(&permits),
    };
    let first = sharding(&group, "r0");
    let mut r0 = Scoped::start(Scoped::informer(gated, &first), first);
    within("the first list", LIMIT, r0.informer.wait_synced(LIMIT))
        .await
        .expect("synced");
    let looks = Looks::default();
    r0.join("r0", &looks);
    eventually("every shard acquired by r0, none gained", LIMIT, || {
        owned_keys(&group, &keys, "r0").len() == 60
    })
    .await;
    let second = sharding(&group, "r1");
    let mut r1 = Scoped::start(Scoped::informer(store.clone(), &second), second);
    r1.join("r1", &looks);
    eventually(
        "r1's share released by r0 and reconciled on r1",
        LIMIT,
        || {
            let share = owned_keys(&group, &keys, "r1");
            let share: Vec<String> = share.into_iter().collect();
            !share.is_empty() && share.len() < 60 && reconciled_by_owners(&group, &looks, &share, 0)
        },
    )
    .await;
    assert!(!r0.sharding.owns_any(), "r0's list still waits");
    permits.add_permits(Semaphore::MAX_PERMITS / 2);
    eventually("every key reconciled by its owner", LIMIT, || {
        reconciled_by_owners(&group, &looks, &keys, 0)
    })
    .await;
    every_reconcile_saw_its_object(&looks);
    r0.stop().await;
    r1.stop().await;
}
