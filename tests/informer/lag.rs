//! How far the cache is behind the source: probed, reported within one
//! probe period, and current again as soon as the cache catches up.

use super::*;

const PERIOD: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

/// A store whose watches deliver each run of changes up to 30 s late.
fn slow_store() -> MemoryStore<Pod> {
    let store = seeded(&["a"]);
    store
        .set_faults(Faults {
            seed: 3,
            delay: Some(Duration::from_secs(30)),
            ..Faults::default()
        })
        .expect("valid faults");
    store
}

#[tokio::test(start_paused = true)]
async fn the_lag_is_reported_within_a_probe_period_and_clears_when_the_cache_catches_up() {
    let store = slow_store();
    let informer = Informer::builder(store.clone())
        .lag_probe_every(PERIOD)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    tokio::time::sleep(2 * PERIOD).await;
    let lag = informer.lag().expect("probed");
    assert_eq!(
        (lag.revisions, lag.behind_for),
        (0, Duration::ZERO),
        "current after the list"
    );

    let written = Instant::now();
    let pod = touch(&store, "a").await;
    let mut samples = Vec::new();
    while informer.cache().get(&key("a")).map(|p| p.status) != Some(pod.status) {
        assert!(
            written.elapsed() < Duration::from_secs(60),
            "the change never arrived"
        );
        samples.push((written.elapsed(), informer.lag().expect("probed")));
        tokio::time::sleep(TICK).await;
    }
    let arrived = written.elapsed();
    assert!(
        arrived > 3 * PERIOD,
        "the seed delays the change long enough: {arrived:?}"
    );
    for (at, lag) in samples.iter().filter(|(at, _)| *at > PERIOD + PERIOD / 10) {
        assert_eq!(lag.revisions, 1, "at {at:?}: one revision behind");
        assert!(
            lag.behind_for > Duration::ZERO && lag.behind_for <= *at,
            "at {at:?}: {lag:?}"
        );
    }
    let last = samples.last().expect("sampled").1;
    assert!(
        last.behind_for + PERIOD + PERIOD / 10 >= arrived - TICK,
        "behind for as long as the change took, less one period: {last:?} of {arrived:?}"
    );
    let lag = informer.lag().expect("probed");
    assert_eq!(
        (lag.revisions, lag.behind_for),
        (0, Duration::ZERO),
        "current at once"
    );
    let stats = informer.stats();
    assert_eq!(stats.lag, Some(lag));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_the_probe_there_is_no_lag_and_a_zero_period_is_refused() {
    let store = seeded(&["a"]);
    let informer = Informer::builder(store.clone())
        .without_lag_probe()
        .build()
        .unwrap();
    let running = Running::start(&informer);
    synced_and_watching(&informer, &store, 1).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(informer.lag(), None);
    running.stop().await;

    let zero = Informer::builder(store.clone())
        .lag_probe_every(Duration::ZERO)
        .build();
    assert!(matches!(
        zero,
        Err(InformerError::InvalidOption {
            setting: InformerSetting::LagProbeEvery,
            error: SettingError::Zero,
            ..
        })
    ));
    // `Duration::MAX` asks once.
    let once = Informer::builder(store.clone())
        .lag_probe_every(Duration::MAX)
        .build()
        .unwrap();
    let running = Running::start(&once);
    synced_and_watching(&once, &store, 2).await;
    tokio::time::sleep(PERIOD).await;
    let first = once.lag().expect("probed once");
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        once.lag().expect("still the first probe").probed,
        first.probed
    );
    running.stop().await;
}

/// A source that cannot tell its head: the informer asks once.
struct Headless(MemoryStore<Pod>, AtomicU32);

#[async_trait]
impl Source for Headless {
    type Object = Pod;

    fn name(&self) -> &str {
        "headless"
    }

    async fn list(&self) -> Result<Snapshot<Pod>, SourceError> {
        self.0.list().await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<Pod>, SourceError> {
        self.0.watch(from).await
    }

    async fn head(&self) -> Result<Option<Revision>, SourceError> {
        self.1.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_that_cannot_tell_its_head_is_asked_once() {
    let source = std::sync::Arc::new(Headless(seeded(&["a"]), AtomicU32::new(0)));
    let informer = Informer::builder_from_arc(source.clone())
        .lag_probe_every(PERIOD)
        .build()
        .unwrap();
    let running = Running::start(&informer);
    within("the informer to sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    tokio::time::sleep(100 * PERIOD).await;
    assert_eq!(
        (informer.lag(), source.1.load(Ordering::Relaxed)),
        (None, 1)
    );
    running.stop().await;
}
