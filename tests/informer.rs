//! The informer against the memory backend: sync, live changes, relists,
//! subscribers, timers, errors, chaos and a proptest state machine.

mod support;

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, stream};
use tend::memory::{Faults, MemoryStore};
use tend::{
    Informer, InformerError, InformerSetting, Revision, SettingError, Snapshot, Source,
    SourceError, WatchStream,
};
use tokio::time::Instant;

use support::{
    Mirror, Pod, Recorder, Running, Seen, assert_same, by_owner, cache_versions, versions,
    wait_until, within,
};

const STEP: Duration = Duration::from_secs(5);

fn seeded(names: &[&str]) -> MemoryStore<Pod> {
    let store = MemoryStore::new("pods");
    let client = store.client();
    for name in names {
        // The memory client completes at once: no runtime needed.
        futures::executor::block_on(client.create(Pod::new(*name, "x", 1))).unwrap();
    }
    store
}

fn informer(store: &MemoryStore<Pod>) -> Informer<Pod> {
    Informer::builder(store.clone()).build().unwrap()
}

fn key(name: &str) -> String {
    name.to_owned()
}

/// Updates `name`'s status (a new version).
async fn touch(store: &MemoryStore<Pod>, name: &str) -> Pod {
    let mut pod = store.get(&key(name)).expect("pod exists");
    pod.status += 1;
    store.client().update(pod).await.unwrap()
}

async fn synced_and_watching(informer: &Informer<Pod>, store: &MemoryStore<Pod>, watches: u64) {
    within("the informer to sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    wait_until("the informer watches", STEP, || {
        store.stats().watches >= watches
    })
    .await;
}

fn assert_cache_matches(informer: &Informer<Pod>, store: &MemoryStore<Pod>) {
    assert_same(
        "cache vs backend",
        &cache_versions(informer),
        &versions(&store.snapshot().objects),
    );
}

#[tokio::test(start_paused = true)]
async fn initial_sync_caches_every_object_and_delivers_initial_events() {
    let store = MemoryStore::new("pods");
    for i in 0..100 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let (recorder, subscription) = Recorder::subscribe(&informer);
    assert!(!informer.is_synced() && !subscription.is_synced());
    let running = Running::start(&informer);

    within("sync", STEP, subscription.wait_synced(STEP))
        .await
        .unwrap();
    assert_cache_matches(&informer, &store);
    let seen = recorder.take();
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|event| matches!(event, Seen::Initial(..))));
    let stats = informer.stats();
    assert_eq!((stats.lists, stats.relists, stats.cache_size), (1, 0, 100));
    assert_eq!(stats.revision, Revision::new(100));
    assert_eq!(informer.name(), "pods");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn live_creates_updates_and_deletes_reach_the_cache_and_subscribers() {
    let store = seeded(&["a", "b"]);
    let informer = informer(&store);
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    touch(&store, "a").await;
    store.client().delete(&key("b")).await.unwrap();
    wait_until("three changes applied", STEP, || {
        informer.stats().events_applied == 3
    })
    .await;

    assert_eq!(
        recorder.take(),
        [
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 3
            },
            Seen::Applied {
                key: key("a"),
                old: Some(1),
                new: 4
            },
            Seen::Deleted(key("b"), 2),
        ]
    );
    assert_cache_matches(&informer, &store);
    assert_eq!(informer.cache().get(&key("a")).unwrap().status, 1);
    assert!(informer.cache().get(&key("b")).is_none());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_revision() {
    let store = seeded(&["a"]);
    // Every watch event is lost: only the bookmark tells the informer where
    // the source is.
    store
        .set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    store
        .client()
        .create(Pod::new("lost", "x", 1))
        .await
        .unwrap();
    store.bookmark();
    wait_until("the bookmark's revision", STEP, || {
        informer.stats().revision == Revision::new(2)
    })
    .await;
    assert!(
        informer.cache().get(&key("lost")).is_none(),
        "dropped events stay lost until a relist"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_after_compaction_emits_the_missed_deletes_and_updates() {
    let store = seeded(&["a", "b", "d"]);
    let informer = informer(&store);
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    // Made and compacted away before the informer's task runs again.
    touch(&store, "a").await;
    store.client().delete(&key("b")).await.unwrap();
    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    store.compact();
    wait_until("the relist", STEP, || informer.stats().relists == 1).await;
    wait_until("three events", STEP, || recorder.len() == 3).await;

    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(
        seen,
        [
            Seen::Applied {
                key: key("a"),
                old: Some(1),
                new: 4
            },
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 6
            },
            Seen::Deleted(key("b"), 2),
        ],
        "the unchanged `d` produces nothing"
    );
    assert_cache_matches(&informer, &store);
    assert_eq!(store.stats().lists, 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_late_subscriber_gets_the_cache_as_initial_then_live_events() {
    let store = MemoryStore::new("pods");
    for i in 0..50 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    let (recorder, subscription) = Recorder::subscribe(&informer);
    assert!(subscription.is_synced());
    within(
        "the late subscription",
        STEP,
        subscription.wait_synced(STEP),
    )
    .await
    .unwrap();
    let replay = recorder.take();
    assert_eq!(replay.len(), 50, "replayed inside subscribe");
    assert!(
        replay
            .iter()
            .all(|event| matches!(event, Seen::Initial(..)))
    );

    touch(&store, "p7").await;
    wait_until("the live event", STEP, || recorder.len() == 1).await;
    assert_eq!(
        recorder.take(),
        [Seen::Applied {
            key: key("p7"),
            old: Some(8),
            new: 51
        }]
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_added_during_live_traffic_sees_every_change_exactly_once() {
    let store = MemoryStore::new("pods");
    for i in 0..500 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    let writer = tokio::spawn({
        let store = store.clone();
        async move {
            let mut rng = fastrand::Rng::with_seed(3);
            for round in 0..20_000 {
                let name = format!("p{}", rng.usize(0..600));
                match store.get(&name) {
                    Some(_) if round % 7 == 0 => drop(store.client().delete(&name).await),
                    Some(_) => drop(touch(&store, &name).await),
                    None => drop(store.client().create(Pod::new(name, "x", 1)).await),
                }
                if round % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    let (mirror, _subscription) = Mirror::subscribe(&informer);
    within("the writer", Duration::from_secs(60), writer)
        .await
        .unwrap();
    let target = store.revision();
    wait_until("the informer catches up", Duration::from_secs(30), || {
        informer.stats().revision == target
    })
    .await;

    assert_eq!(mirror.anomalies(), Vec::<String>::new());
    assert_same(
        "late subscriber's view vs cache",
        &mirror.snapshot(),
        &cache_versions(&informer),
    );
    assert_cache_matches(&informer, &store);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resync_redelivers_every_cached_object_on_its_cadence_without_calling_the_source() {
    let store = seeded(&["a", "b", "c"]);
    let informer = Informer::builder(store.clone())
        .resync_every(Duration::from_secs(10))
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let start = Instant::now();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    let resyncs = || recorder.count(|event| matches!(event, Seen::Resync(..)));

    // First round within 10 s ± 10 %, the second one 10 s ± 10 % later.
    tokio::time::sleep_until(start + Duration::from_millis(8_900)).await;
    assert_eq!(resyncs(), 0, "no resync before 9 s");
    tokio::time::sleep_until(start + Duration::from_millis(11_100)).await;
    assert_eq!(resyncs(), 3, "one round by 11 s");
    tokio::time::sleep_until(start + Duration::from_millis(17_900)).await;
    assert_eq!(resyncs(), 3, "no second round before 18 s");
    tokio::time::sleep_until(start + Duration::from_millis(22_300)).await;
    assert_eq!(resyncs(), 6, "a second round by 22 s");

    let stats = informer.stats();
    assert_eq!((stats.resyncs, stats.lists), (2, 1));
    assert_eq!(store.stats().lists, 1, "resync never calls the source");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_relist_timer_repairs_events_the_source_lost() {
    let store = seeded(&["a", "b"]);
    store
        .set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let informer = Informer::builder(store.clone())
        .relist_every(Duration::from_secs(60))
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let start = Instant::now();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    recorder.take();

    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    store.client().delete(&key("a")).await.unwrap();
    touch(&store, "b").await;
    tokio::time::sleep_until(start + Duration::from_secs(53)).await;
    assert_eq!(
        cache_versions(&informer).len(),
        2,
        "the lost events are not seen before the relist"
    );
    assert_eq!(recorder.len(), 0);

    tokio::time::sleep_until(start + Duration::from_secs(67)).await;
    assert_eq!(store.stats().lists, 2);
    assert_cache_matches(&informer, &store);
    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(
        seen,
        [
            Seen::Applied {
                key: key("b"),
                old: Some(2),
                new: 5
            },
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 3
            },
            Seen::Deleted(key("a"), 1),
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_sync_that_never_comes_fails_naming_the_source() {
    let store = seeded(&["a"]);
    store.fail_next_lists(u32::MAX);
    let informer = informer(&store);
    let (_recorder, subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);

    let expected = InformerError::SyncTimeout {
        source_name: "pods".into(),
        timeout: Duration::from_secs(3),
    };
    let timeout = Duration::from_secs(3);
    assert_eq!(informer.wait_synced(timeout).await, Err(expected.clone()));
    assert_eq!(
        informer.cache().wait_synced(timeout).await,
        Err(expected.clone())
    );
    assert_eq!(
        subscription.wait_synced(timeout).await,
        Err(expected.clone())
    );
    assert_eq!(
        expected.to_string(),
        "informer for source `pods` did not sync within 3s"
    );
    assert!(informer.stats().lists >= 2, "lists are retried");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failed_lists_back_off_exponentially_then_recover() {
    let store = seeded(&["a"]);
    store.fail_next_lists(3);
    let informer = informer(&store);
    let start = Instant::now();
    let running = Running::start(&informer);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        store.stats().lists,
        1,
        "no retry before the first backoff (800 ms ± 20 %)"
    );

    within(
        "sync after three failures",
        Duration::from_secs(30),
        informer.wait_synced(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let elapsed = start.elapsed();
    // 0.8 + 1.6 + 3.2 s, each ± 20 %.
    assert!(
        elapsed >= Duration::from_millis(4_480) && elapsed <= Duration::from_millis(6_720),
        "synced after {elapsed:?}"
    );
    assert_eq!(informer.stats().lists, 4);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_backoff_without_a_maximum_waits_instead_of_panicking_on_the_first_failed_list() {
    let store = seeded(&["a"]);
    store.fail_next_lists(1);
    let informer = Informer::builder(store.clone())
        .backoff(Duration::MAX, Duration::MAX, Duration::MAX)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(store.stats().lists, 1, "the retry is (practically) never");
    assert!(!informer.is_synced());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn duration_max_timers_never_fire() {
    let store = seeded(&["a"]);
    let informer = Informer::builder(store.clone())
        .resync_every(Duration::MAX)
        .relist_every(Duration::MAX)
        .build()
        .unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    // A day later, only the initial object was delivered.
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(recorder.len(), 1);
    touch(&store, "a").await;
    wait_until("the change", STEP, || recorder.len() == 2).await;
    assert_eq!(store.stats().lists, 1, "no relist");
    assert_eq!(informer.stats().resyncs, 0);
    running.stop().await;
}

/// A source whose `watch` fails the first `failures` times.
struct FlakyWatch {
    store: MemoryStore<Pod>,
    failures: AtomicU32,
}

#[async_trait]
impl Source for FlakyWatch {
    type Object = Pod;

    fn name(&self) -> &str {
        "flaky"
    }

    async fn list(&self) -> Result<Snapshot<Pod>, SourceError> {
        self.store.list().await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<Pod>, SourceError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(SourceError::unavailable("connection refused"));
        }
        self.store.watch(from).await
    }
}

#[tokio::test(start_paused = true)]
async fn repeated_watch_failures_lead_to_a_relist() {
    let store = seeded(&["a"]);
    let informer = Informer::builder(FlakyWatch {
        store: store.clone(),
        failures: AtomicU32::new(3),
    })
    .max_watch_failures(NonZeroU32::new(3).unwrap())
    .build()
    .unwrap();
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    wait_until("the relist", Duration::from_secs(60), || {
        informer.stats().relists == 1
    })
    .await;
    wait_until("a working watch", Duration::from_secs(60), || {
        store.stats().watches == 1
    })
    .await;

    store.client().create(Pod::new("b", "x", 1)).await.unwrap();
    wait_until("the live change", STEP, || informer.cache().len() == 2).await;
    assert_eq!(informer.stats().lists, 2);
    running.stop().await;
}

/// A source that can be taken down: while `down` holds `true`, lists and
/// new watches fail and open watches end with an error.
struct Outage {
    store: MemoryStore<Pod>,
    down: tokio::sync::watch::Receiver<bool>,
}

impl Outage {
    fn refuse(&self) -> Result<(), SourceError> {
        if *self.down.borrow() {
            return Err(SourceError::unavailable("connection refused"));
        }
        Ok(())
    }
}

#[async_trait]
impl Source for Outage {
    type Object = Pod;

    fn name(&self) -> &str {
        "outage"
    }

    async fn list(&self) -> Result<Snapshot<Pod>, SourceError> {
        self.refuse()?;
        self.store.list().await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<Pod>, SourceError> {
        self.refuse()?;
        let mut down = self.down.clone();
        let cut = async move {
            let _ = down.wait_for(|down| *down).await;
        };
        let reset = stream::once(async { Err(SourceError::unavailable("connection reset")) });
        Ok(self
            .store
            .watch(from)
            .await?
            .take_until(cut)
            .chain(reset)
            .boxed())
    }
}

#[tokio::test(start_paused = true)]
async fn stats_tell_when_the_informer_last_progressed_and_since_when_its_source_fails() {
    let store = seeded(&["a"]);
    let (down, watch_down) = tokio::sync::watch::channel(false);
    let informer = Informer::builder(Outage {
        store: store.clone(),
        down: watch_down,
    })
    .build()
    .unwrap();
    let before = informer.stats();
    assert_eq!((before.last_progress, before.failing_since), (None, None));
    let start = Instant::now();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    let listed = informer.stats();
    assert_eq!(
        (listed.last_progress, listed.failing_since),
        (Some(start), None)
    );

    tokio::time::sleep(STEP).await;
    let changed = Instant::now();
    touch(&store, "a").await;
    wait_until("the change", STEP, || {
        informer.stats().last_progress >= Some(changed)
    })
    .await;
    tokio::time::sleep(STEP).await;
    let bookmarked = Instant::now();
    store.bookmark();
    wait_until("the bookmark", STEP, || {
        informer.stats().last_progress >= Some(bookmarked)
    })
    .await;
    let progressed = informer.stats().last_progress;

    // A short outage: the watch is cut, then reopens (no relist) on a quiet
    // source. An opened watch ends the failures, but is not progress.
    down.send(true).unwrap();
    wait_until("the cut", STEP, || informer.stats().failing_since.is_some()).await;
    down.send(false).unwrap();
    wait_until("the reconnect", STEP, || {
        informer.stats().failing_since.is_none()
    })
    .await;
    let reconnected = informer.stats();
    assert_eq!(
        (reconnected.lists, reconnected.last_progress),
        (1, progressed),
        "reconnected without a list, and nothing delivered"
    );

    let broke = Instant::now();
    down.send(true).unwrap();
    wait_until("the failure", STEP, || {
        informer.stats().failing_since.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    let failing = informer.stats();
    assert_eq!(
        failing.failing_since,
        Some(broke),
        "the run of failures began when the watch was cut"
    );
    assert_eq!(failing.last_progress, progressed, "no progress since");
    assert!(
        failing.lists > 1,
        "it tried to relist, in vain: {failing:?}"
    );

    down.send(false).unwrap();
    wait_until("the recovery", Duration::from_secs(60), || {
        informer.stats().failing_since.is_none()
    })
    .await;
    assert!(
        informer.stats().last_progress > progressed,
        "a list succeeded"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_cut_watch_resumes_from_the_last_seen_revision_without_relisting() {
    let store = seeded(&["a"]);
    store
        .set_faults(Faults {
            cut_after: NonZeroUsize::new(2),
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let (mirror, _subscription) = Mirror::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    for i in 0..7 {
        store
            .client()
            .create(Pod::new(format!("p{i}"), "x", 1))
            .await
            .unwrap();
    }
    wait_until("every change", Duration::from_secs(120), || {
        informer.cache().len() == 8
    })
    .await;
    assert_cache_matches(&informer, &store);
    let stats = informer.stats();
    assert_eq!(stats.lists, 1, "no relist needed");
    assert!(stats.watch_restarts >= 3, "{stats:?}");
    assert_eq!(stats.events_applied, 7);
    assert!(mirror.anomalies().is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn duplicated_and_reordered_changes_are_ignored_and_counted() {
    let store = seeded(&["a", "b", "c"]);
    store
        .set_faults(Faults {
            seed: 5,
            duplicate: 1.0,
            reorder: 0.4,
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let (mirror, _subscription) = Mirror::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;

    for round in 0..60 {
        touch(&store, ["a", "b", "c"][round % 3]).await;
        if round % 10 == 0 {
            store.client().delete(&key("c")).await.unwrap();
            store.client().create(Pod::new("c", "x", 1)).await.unwrap();
        }
    }
    let target = store.revision();
    wait_until("the informer catches up", STEP, || {
        informer.stats().revision == target
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    assert_cache_matches(&informer, &store);
    assert!(
        informer.stats().stale_ignored >= 30,
        "{:?}",
        informer.stats()
    );
    assert_eq!(mirror.anomalies(), Vec::<String>::new(), "no regressions");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_transform_runs_before_caching() {
    let store = MemoryStore::new("pods");
    let mut pod = Pod::new("a", "x", 1);
    pod.status = 42;
    store.client().create(pod).await.unwrap();
    let informer = Informer::builder(store.clone())
        .transform(|mut pod: Pod| {
            pod.status = 0;
            pod
        })
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    assert_eq!(informer.cache().get(&key("a")).unwrap().status, 0);

    let mut pod = store.get(&key("a")).unwrap();
    pod.status = 43;
    store.client().update(pod).await.unwrap();
    wait_until("the update", STEP, || informer.stats().events_applied == 1).await;
    let cached = informer.cache().get(&key("a")).unwrap();
    assert_eq!((cached.status, cached.version), (0, Revision::new(2)));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn indexes_follow_creates_updates_and_deletes() {
    let store = MemoryStore::new("pods");
    store
        .client()
        .create(Pod::new("a", "rs1", 1))
        .await
        .unwrap();
    store
        .client()
        .create(Pod::new("b", "rs1", 1))
        .await
        .unwrap();
    store
        .client()
        .create(Pod::new("c", "rs2", 1))
        .await
        .unwrap();
    let informer = Informer::builder(store.clone())
        .index("by_owner", by_owner)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    let cache = informer.cache();
    let names = |owner: &str| {
        let mut names: Vec<String> = cache
            .by_index("by_owner", owner)
            .unwrap()
            .iter()
            .map(|pod| pod.name.clone())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names("rs1"), ["a", "b"]);

    let mut moved = store.get(&key("b")).unwrap();
    moved.owner = "rs2".into();
    store.client().update(moved).await.unwrap();
    store.client().delete(&key("a")).await.unwrap();
    wait_until("two changes", STEP, || informer.stats().events_applied == 2).await;
    assert_eq!(names("rs1"), Vec::<String>::new());
    assert_eq!(names("rs2"), ["b", "c"]);
    let mut keys = cache.keys_by_index("by_owner", "rs2").unwrap();
    keys.sort();
    assert_eq!(keys, ["b", "c"]);
    assert_eq!(cache.index_names(), ["by_owner"]);

    let error = cache.by_index("by_node", "n1").unwrap_err();
    assert_eq!(
        error,
        InformerError::UnknownIndex {
            source_name: "pods".into(),
            index: "by_node".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "informer for source `pods` has no index named `by_node`"
    );
    assert!(cache.keys_by_index("by_node", "n1").is_err());
    running.stop().await;
}

#[test]
fn bad_configuration_is_refused_with_typed_errors() {
    let store = seeded(&[]);
    let error = Informer::builder(store.clone())
        .index("by_owner", by_owner)
        .index("by_owner", by_owner)
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        InformerError::DuplicateIndex {
            source_name: "pods".into(),
            index: "by_owner".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "informer for source `pods` already has an index named `by_owner`"
    );

    let invalid = |builder: tend::InformerBuilder<Pod>| match builder.build() {
        Err(InformerError::InvalidOption { setting, error, .. }) => (setting, error),
        other => panic!("expected an invalid option, got {other:?}"),
    };
    let builder = || Informer::builder(store.clone());
    assert_eq!(
        invalid(builder().resync_every(Duration::ZERO)),
        (InformerSetting::ResyncEvery, SettingError::Zero)
    );
    assert_eq!(
        invalid(builder().relist_every(Duration::ZERO)),
        (InformerSetting::RelistEvery, SettingError::Zero)
    );
    let second = Duration::from_secs(1);
    assert_eq!(
        invalid(builder().backoff(Duration::ZERO, second, second)),
        (InformerSetting::Backoff, SettingError::Zero)
    );
    assert_eq!(
        invalid(builder().backoff(second, second, Duration::ZERO)),
        (InformerSetting::Backoff, SettingError::Zero)
    );
    let error = builder()
        .backoff(second * 2, second, second)
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "informer for source `pods`: `backoff` starts above its maximum"
    );
}

#[tokio::test(start_paused = true)]
async fn running_twice_at_once_is_refused() {
    let store = seeded(&["a"]);
    let informer = informer(&store);
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    let second = informer
        .run(tokio_util::sync::CancellationToken::new())
        .await;
    assert_eq!(
        second,
        Err(InformerError::AlreadyRunning {
            source_name: "pods".into()
        })
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stopped_informer_relists_when_run_again() {
    let store = seeded(&["a", "b"]);
    let informer = informer(&store);
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    running.stop().await;
    recorder.take();

    store.client().delete(&key("a")).await.unwrap();
    store.client().create(Pod::new("c", "x", 1)).await.unwrap();
    let running = Running::start(&informer);
    wait_until("the relist", STEP, || informer.stats().relists == 1).await;
    assert_cache_matches(&informer, &store);
    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(
        seen,
        [
            Seen::Applied {
                key: key("c"),
                old: None,
                new: 4
            },
            Seen::Deleted(key("a"), 1)
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_subscription_receives_nothing_more() {
    let store = seeded(&["a"]);
    let informer = informer(&store);
    let (recorder, subscription) = Recorder::subscribe(&informer);
    let (other, _kept) = Recorder::subscribe(&informer);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    drop(subscription);
    recorder.take();
    other.take();

    touch(&store, "a").await;
    wait_until("the other subscriber's event", STEP, || other.len() == 1).await;
    assert_eq!(recorder.len(), 0);
    running.stop().await;
}

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

#[tokio::test(start_paused = true)]
async fn the_reconnect_backoff_doubles_then_resets_after_two_healthy_minutes() {
    let store = seeded(&["a"]);
    store
        .set_faults(Faults {
            cut_after: NonZeroUsize::new(1),
            ..Faults::default()
        })
        .unwrap();
    let informer = informer(&store);
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    // Four changes already in the history: every watch delivers one, is cut,
    // and the informer backs off before the next.
    for name in ["b", "c", "d", "e"] {
        store.client().create(Pod::new(name, "x", 1)).await.unwrap();
    }
    let mut opened = vec![Instant::now()];
    for watches in 2..=5 {
        wait_until("the next watch", Duration::from_secs(60), || {
            store.stats().watches == watches
        })
        .await;
        opened.push(Instant::now());
    }
    let gaps: Vec<f64> = opened
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64())
        .collect();
    for (gap, expected) in gaps.iter().zip([0.8, 1.6, 3.2, 6.4]) {
        assert!(
            (gap - expected).abs() <= expected * 0.2 + 0.02,
            "backoff gaps {gaps:?}"
        );
    }

    // The fifth watch stays up for three minutes before it is cut: the next
    // delay starts again from 800 ms (it would be 12.8 s otherwise).
    tokio::time::sleep(Duration::from_secs(180)).await;
    store.client().create(Pod::new("f", "x", 1)).await.unwrap();
    let cut = Instant::now();
    wait_until("the sixth watch", Duration::from_secs(60), || {
        store.stats().watches == 6
    })
    .await;
    let delay = (Instant::now() - cut).as_secs_f64();
    assert!(
        (0.62..=0.98).contains(&delay),
        "delay after a healthy period {delay}"
    );
    assert_cache_matches(&informer, &store);
    running.stop().await;
}

#[test]
fn handles_are_cheap_to_share_across_tasks() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    fn sendable<T: Send + Sync + 'static>() {}
    shareable::<Informer<Pod>>();
    shareable::<tend::Cache<Pod>>();
    shareable::<MemoryStore<Pod>>();
    sendable::<tend::Subscription<Pod>>();
    sendable::<tend::Event<Pod>>();
}

/// A source whose every watch says the revision expired.
struct AlwaysExpired(MemoryStore<Pod>);

#[async_trait]
impl Source for AlwaysExpired {
    type Object = Pod;

    fn name(&self) -> &str {
        "always-expired"
    }

    async fn list(&self) -> Result<Snapshot<Pod>, SourceError> {
        self.0.list().await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<Pod>, SourceError> {
        Err(SourceError::Expired {
            requested: from,
            compacted: from.next(),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_that_expires_right_after_every_list_is_not_hammered() {
    let informer = Informer::builder(AlwaysExpired(seeded(&["a"])))
        .build()
        .unwrap();
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    // Backing off 0.8 s doubling to 30 s: a handful of lists a minute, not
    // thousands.
    let lists = informer.stats().lists;
    assert!((3..=8).contains(&lists), "{lists} lists in a minute");
    running.stop().await;
}
