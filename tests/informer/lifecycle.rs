//! Configuration, running, stopping and dropping.

use super::*;

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
