//! Chaos runs against the backend, and a proptest state machine.

use super::*;

// ----- chaos ---------------------------------------------------------------

const CHAOS_KEYS: usize = 10_000;
const CHAOS_WRITES: usize = 200_000;
const RELIST: Duration = Duration::from_secs(300);

/// 10k keys, 200k random writes, 30 % of watch events dropped plus
/// duplicates and reorders, every watch cut after 1,000 events. Returns the
/// informer (still running), the backend and the mirror subscriber.
async fn chaos(
    relist: bool,
) -> (
    Informer<Pod>,
    MemoryStore<Pod>,
    Mirror,
    Running,
    tend::Subscription<Pod>,
) {
    let store = MemoryStore::with_history("pods", NonZeroUsize::new(CHAOS_WRITES * 2).unwrap());
    for i in 0..CHAOS_KEYS {
        store
            .client()
            .create(Pod::new(format!("p{i}"), format!("o{}", i % 100), 1))
            .await
            .unwrap();
    }
    store
        .set_faults(Faults {
            seed: 2026,
            drop: 0.3,
            duplicate: 0.05,
            reorder: 0.05,
            cut_after: NonZeroUsize::new(1_000),
            delay: None,
        })
        .unwrap();
    let mut builder = Informer::builder(store.clone())
        .index("by_owner", by_owner)
        .resync_every(Duration::from_secs(60));
    if relist {
        builder = builder.relist_every(RELIST);
    }
    let informer = builder.build().unwrap();
    let (mirror, subscription) = Mirror::subscribe(&informer);
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();

    let mut rng = fastrand::Rng::with_seed(7);
    for round in 0..CHAOS_WRITES {
        let name = format!("p{}", rng.usize(0..CHAOS_KEYS));
        match store.get(&name) {
            Some(_) if rng.u8(0..10) == 0 => drop(store.client().delete(&name).await),
            Some(mut pod) => {
                pod.status += 1;
                if rng.bool() {
                    pod.owner = format!("o{}", rng.usize(0..100));
                }
                store.client().update(pod).await.unwrap();
            }
            None => drop(store.client().create(Pod::new(name, "o0", 1)).await),
        }
        if round % 1_000 == 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    (informer, store, mirror, running, subscription)
}

fn index_is_consistent(informer: &Informer<Pod>) {
    let cache = informer.cache();
    let mut expected: HashMap<String, Vec<String>> = HashMap::new();
    for pod in cache.list() {
        expected
            .entry(pod.owner.clone())
            .or_default()
            .push(pod.name.clone());
    }
    for owner in (0..100).map(|i| format!("o{i}")) {
        let mut indexed = cache.keys_by_index("by_owner", &owner).unwrap();
        indexed.sort();
        let mut wanted = expected.remove(&owner).unwrap_or_default();
        wanted.sort();
        assert_eq!(indexed, wanted, "index entries for {owner}");
    }
}

#[tokio::test(start_paused = true)]
async fn chaos_with_the_relist_timer_the_cache_equals_the_backend_after_one_relist_period() {
    let (informer, store, mirror, running, _subscription) = chaos(true).await;
    // One relist period (+10 % jitter) after the last write.
    tokio::time::sleep(RELIST.mul_f64(1.1) + Duration::from_secs(1)).await;

    assert_cache_matches(&informer, &store);
    index_is_consistent(&informer);
    assert_eq!(
        mirror.anomalies(),
        Vec::<String>::new(),
        "no cache regressions"
    );
    assert_same(
        "mirror vs cache",
        &mirror.snapshot(),
        &cache_versions(&informer),
    );
    let stats = informer.stats();
    assert!(
        stats.relists >= 1 && stats.watch_restarts >= 10,
        "{stats:?}"
    );
    assert!(
        stats.stale_ignored > 0,
        "duplicates were ignored: {stats:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn chaos_without_the_relist_timer_resync_cannot_repair_lost_events() {
    let (informer, store, mirror, running, _subscription) = chaos(false).await;
    // Dropped events leave the informer's revision behind; bookmarks (sent
    // until one reaches an open, caught-up watch) bring it to the end.
    let target = store.revision();
    // Catching up is slow: every cut watch costs a backoff of up to 30 s.
    for _ in 0..2_000 {
        if informer.stats().revision >= target {
            break;
        }
        store.bookmark();
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert_eq!(
        informer.stats().revision,
        target,
        "the informer did not reach the last revision"
    );
    // Several resync rounds later the cache is still wrong: a resync
    // re-delivers what the cache holds, it never asks the source. Objects
    // whose last change was dropped keep an old state (or stay deleted, or
    // linger after their deletion) until something lists again.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(informer.stats().resyncs >= 4);
    let cache = cache_versions(&informer);
    let backend = versions(&store.snapshot().objects);
    let wrong = backend
        .iter()
        .filter(|(key, version)| cache.get(*key) != Some(version))
        .count()
        + cache
            .keys()
            .filter(|key| !backend.contains_key(*key))
            .count();
    assert!(
        wrong > 100,
        "expected many keys left wrong by dropped events, got {wrong}"
    );
    // What resync does guarantee: the cache never went back in time, its
    // indexes agree with it, and subscribers saw exactly the cache's story.
    assert_eq!(
        mirror.anomalies(),
        Vec::<String>::new(),
        "no cache regressions"
    );
    index_is_consistent(&informer);
    assert_same("mirror vs cache", &mirror.snapshot(), &cache);
    assert_eq!(informer.stats().relists, 0);
    running.stop().await;
}

// ----- proptest state machine ------------------------------------------------

mod state_machine {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Put {
            key: u8,
            owner: u8,
            spec: u8,
        },
        Delete {
            key: u8,
        },
        /// Let the informer run for this many milliseconds of tokio time.
        Run {
            millis: u16,
        },
        /// Compact the history: a watcher left behind must relist.
        Compact,
        /// Stop the informer and run it again (a relist).
        Restart,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..8u8, 0..3u8, 0..3u8).prop_map(|(key, owner, spec)| Op::Put { key, owner, spec }),
            2 => (0..8u8).prop_map(|key| Op::Delete { key }),
            3 => (0..3_000u16).prop_map(|millis| Op::Run { millis }),
            1 => Just(Op::Compact),
            1 => Just(Op::Restart),
        ]
    }

    fn faults() -> impl Strategy<Value = Faults> {
        (
            any::<u64>(),
            prop::bool::ANY,
            prop::bool::ANY,
            prop::option::of(1..6usize),
        )
            .prop_map(|(seed, lossy, messy, cut)| Faults {
                seed,
                drop: if lossy { 0.3 } else { 0.0 },
                duplicate: if messy { 0.2 } else { 0.0 },
                reorder: if messy { 0.2 } else { 0.0 },
                cut_after: cut.and_then(NonZeroUsize::new),
                delay: None,
            })
    }

    fn check_indexes(informer: &Informer<Pod>) -> Result<(), TestCaseError> {
        let cache = informer.cache();
        for owner in 0..3 {
            let owner = format!("o{owner}");
            let mut indexed: Vec<String> = cache
                .by_index("by_owner", &owner)
                .unwrap()
                .iter()
                .map(|pod| pod.name.clone())
                .collect();
            indexed.sort();
            let mut wanted: Vec<String> = cache
                .list()
                .iter()
                .filter(|pod| pod.owner == owner)
                .map(|pod| pod.name.clone())
                .collect();
            wanted.sort();
            prop_assert_eq!(indexed, wanted, "index entries for {}", owner);
        }
        Ok(())
    }

    async fn run_case(faults: Faults, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let store = MemoryStore::with_history("pods", NonZeroUsize::new(64).unwrap());
        store.set_faults(faults).unwrap();
        let informer = Informer::builder(store.clone())
            .index("by_owner", by_owner)
            .relist_every(Duration::from_secs(20))
            .build()
            .unwrap();
        let (mirror, _subscription) = Mirror::subscribe(&informer);
        let mut running = Running::start(&informer);
        for op in ops {
            match op {
                Op::Put { key, owner, spec } => {
                    let mut pod = Pod::new(format!("k{key}"), format!("o{owner}"), u64::from(spec));
                    pod.status = store.revision().get();
                    store.put(pod);
                }
                Op::Delete { key } => drop(store.client().delete(&format!("k{key}")).await),
                Op::Run { millis } => {
                    tokio::time::sleep(Duration::from_millis(u64::from(millis))).await;
                    check_indexes(&informer)?;
                }
                Op::Compact => store.compact(),
                Op::Restart => {
                    running.stop().await;
                    running = Running::start(&informer);
                }
            }
        }
        // One relist period (+10 %) later the cache equals the source.
        tokio::time::sleep(Duration::from_secs(23)).await;
        check_indexes(&informer)?;
        let cache = cache_versions(&informer);
        prop_assert_eq!(&cache, &versions(&store.snapshot().objects));
        prop_assert_eq!(mirror.anomalies(), Vec::<String>::new());
        prop_assert_eq!(&mirror.snapshot(), &cache);
        running.stop().await;
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn after_random_changes_faults_and_relists_the_cache_equals_the_source(
            faults in faults(),
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(run_case(faults, ops))?;
        }
    }
}
