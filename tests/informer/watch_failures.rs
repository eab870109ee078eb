//! Watches that fail, get cut or expire, and the stats that tell.

use super::*;

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

/// An informer over `store` whose first three watches fail, after which
/// it lists again.
fn relisting_after_three_failures(store: &MemoryStore<Pod>) -> Informer<Pod> {
    Informer::builder(FlakyWatch {
        store: store.clone(),
        failures: AtomicU32::new(3),
    })
    .max_watch_failures(NonZeroU32::new(3).unwrap())
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn repeated_watch_failures_lead_to_a_relist() {
    let store = seeded(&["a"]);
    let informer = relisting_after_three_failures(&store);
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

/// A subscriber that counts objects per owner never sees a replacement
/// beside what it replaced: a relist delivers its deletions first.
#[tokio::test(start_paused = true)]
async fn a_relist_delivers_its_deletions_before_its_other_changes() {
    let store = seeded(&["a", "c"]);
    let informer = relisting_after_three_failures(&store);
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    let _subscription = informer.subscribe(move |event: &tend::Event<Pod>| {
        let kind = match event {
            tend::Event::Initial(_) => "initial",
            tend::Event::Applied { .. } => "applied",
            tend::Event::Deleted(_) => "deleted",
            tend::Event::Resync(_) => "resync",
        };
        record
            .lock()
            .push(format!("{kind} {}", event.object().name));
    });
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    // Changed while the watch fails: only the relist tells.
    let client = store.client();
    client.create(Pod::new("b", "x", 1)).await.unwrap();
    client.delete(&"c".to_owned()).await.unwrap();
    client.delete(&"a".to_owned()).await.unwrap();
    wait_until("the relist", Duration::from_secs(60), || {
        informer.stats().relists == 1
    })
    .await;
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    let mut relisted = seen[2..].to_vec();
    relisted[..2].sort();
    assert_eq!(
        relisted,
        ["deleted a", "deleted c", "applied b"],
        "{seen:?}"
    );
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

    let progressed = assert_changes_and_bookmarks_are_progress(&informer, &store).await;
    // A short outage: the watch is cut, then reopens (no relist) on a quiet
    // source. An opened watch ends the failures, but is not progress.
    assert_a_short_outage_is_no_progress(&informer, &down, progressed).await;
    assert_a_long_outage_fails_since_the_cut(&informer, &down, progressed).await;

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

/// A change, then a bookmark, each moves `last_progress`; returns the last.
async fn assert_changes_and_bookmarks_are_progress(
    informer: &Informer<Pod>,
    store: &MemoryStore<Pod>,
) -> Option<Instant> {
    tokio::time::sleep(STEP).await;
    let changed = Instant::now();
    touch(store, "a").await;
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
    informer.stats().last_progress
}

async fn assert_a_short_outage_is_no_progress(
    informer: &Informer<Pod>,
    down: &tokio::sync::watch::Sender<bool>,
    progressed: Option<Instant>,
) {
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
}

/// A long outage: failing since the cut, no progress, relists tried in vain.
async fn assert_a_long_outage_fails_since_the_cut(
    informer: &Informer<Pod>,
    down: &tokio::sync::watch::Sender<bool>,
    progressed: Option<Instant>,
) {
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
