//! The poll backend: a list-only system turned into a watchable source.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::poll::{PollConfigError, PollSource};
use tend::{Informer, Revision, Source};
use tokio::time::Instant;

use support::{Pod, Recorder, Running, Seen, within};

const STEP: Duration = Duration::from_secs(5);
const INTERVAL: Duration = Duration::from_secs(10);

/// A list-only "world" that can be told to fail, recording when it is listed.
#[derive(Clone, Default)]
struct World {
    pods: Arc<Mutex<Vec<Pod>>>,
    failures_left: Arc<AtomicU32>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl World {
    fn with(names: &[&str]) -> Self {
        let world = Self::default();
        for name in names {
            world.put(Pod::new(*name, "x", 1));
        }
        world
    }

    fn put(&self, pod: Pod) {
        let mut pods = self.pods.lock().unwrap();
        pods.retain(|other| other.name != pod.name);
        pods.push(pod);
    }

    fn remove(&self, name: &str) {
        self.pods.lock().unwrap().retain(|pod| pod.name != name);
    }

    fn source(&self) -> PollSource<Pod> {
        let world = self.clone();
        PollSource::new("world", INTERVAL, move || {
            let world = world.clone();
            async move {
                world.calls.lock().unwrap().push(Instant::now());
                let left = world.failures_left.load(Ordering::SeqCst);
                if left > 0 {
                    world.failures_left.store(left - 1, Ordering::SeqCst);
                    return Err(std::io::Error::other("sensor offline"));
                }
                Ok(world.pods.lock().unwrap().clone())
            }
        })
        .unwrap()
    }

    fn calls(&self) -> Vec<Instant> {
        self.calls.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn appearing_changing_and_vanishing_objects_are_detected() {
    let world = World::with(&["a", "b", "d"]);
    let informer = Informer::builder(world.source()).build().unwrap();
    let (recorder, _subscription) = Recorder::subscribe(&informer);
    let start = Instant::now();
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    assert_eq!(informer.cache().len(), 3);
    let initial_versions = sorted_versions(&informer);
    assert_eq!(
        initial_versions,
        [1, 2, 3],
        "each new object gets its own revision"
    );
    recorder.take();

    let mut b = Pod::new("b", "x", 2);
    b.status = 9;
    world.put(b);
    world.put(Pod::new("c", "x", 1));
    world.remove("a");
    tokio::time::sleep_until(start + INTERVAL.mul_f64(1.1) + Duration::from_millis(10)).await;

    let mut seen = recorder.take();
    seen.sort_by_key(|event| format!("{event:?}"));
    let old_b = seen.iter().find_map(|event| match event {
        Seen::Applied { key, old, .. } if key == "b" => *old,
        _ => None,
    });
    assert!(
        old_b.is_some(),
        "b's update carries its old state: {seen:?}"
    );
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter()
            .any(|event| matches!(event, Seen::Applied { key, old: None, .. } if key == "c"))
    );
    assert!(
        seen.iter()
            .any(|event| matches!(event, Seen::Deleted(key, _) if key == "a"))
    );
    assert_eq!(informer.cache().get(&"b".to_string()).unwrap().status, 9);
    assert!(informer.cache().get(&"a".to_string()).is_none());

    // Nothing changed: the next poll produces nothing.
    tokio::time::sleep(INTERVAL.mul_f64(1.2)).await;
    assert_eq!(recorder.len(), 0);
    assert!(world.calls().len() >= 3);
    running.stop().await;
}

/// The versions of the cached pods, sorted.
fn sorted_versions(informer: &Informer<Pod>) -> Vec<u64> {
    let mut versions: Vec<u64> = informer
        .cache()
        .list()
        .iter()
        .map(|pod| pod.version.get())
        .collect();
    versions.sort_unstable();
    versions
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_and_recover() {
    let world = World::with(&["a"]);
    let informer = Informer::builder(world.source()).build().unwrap();
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    world.failures_left.store(3, Ordering::SeqCst);
    world.put(Pod::new("b", "x", 1));

    within(
        "b after recovery",
        Duration::from_secs(600),
        support::wait_until("b appears", Duration::from_secs(600), || {
            informer.cache().len() == 2
        }),
    )
    .await;

    let calls = world.calls();
    let gaps: Vec<f64> = calls
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64())
        .collect();
    // list, poll (fails), then 20 s, 40 s and (the success) 80 s later, ± 10 %.
    assert_eq!(gaps.len(), 4, "calls at {gaps:?}");
    for (gap, expected) in gaps.iter().zip([10.0, 20.0, 40.0, 80.0]) {
        assert!(
            (gap - expected).abs() <= expected * 0.1 + 0.02,
            "gaps {gaps:?}"
        );
    }

    // Recovered: back to the plain interval.
    tokio::time::sleep(INTERVAL.mul_f64(1.1)).await;
    let calls = world.calls();
    let last = (calls[calls.len() - 1] - calls[calls.len() - 2]).as_secs_f64();
    assert!(
        (9.0..=11.0).contains(&last),
        "interval after recovery {last}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_backoff_is_capped() {
    let world = World::with(&["a"]);
    let source = world.source().with_max_backoff(Duration::from_secs(15));
    let informer = Informer::builder(source).build().unwrap();
    let running = Running::start(&informer);
    within("sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    world.failures_left.store(u32::MAX, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(200)).await;
    let calls = world.calls();
    let longest = calls
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap();
    assert!(
        longest <= Duration::from_millis(16_500),
        "longest gap {longest:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_first_list_is_retried_by_the_informer() {
    let world = World::with(&["a"]);
    world.failures_left.store(2, Ordering::SeqCst);
    let informer = Informer::builder(world.source()).build().unwrap();
    let running = Running::start(&informer);
    within(
        "sync",
        Duration::from_secs(30),
        informer.wait_synced(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    assert_eq!(informer.stats().lists, 3);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_from_an_old_revision_is_expired() {
    let world = World::with(&["a", "b"]);
    let source = world.source();
    let snapshot = source.list().await.unwrap();
    assert_eq!(snapshot.revision, Revision::new(2));
    assert!(source.watch(snapshot.revision).await.is_ok());
    let error = source
        .watch(Revision::new(1))
        .await
        .err()
        .expect("expected expiry");
    assert!(error.is_expired());
    assert_eq!(source.name(), "world");
}

#[test]
fn a_zero_interval_is_refused() {
    let error = PollSource::<Pod>::new("world", Duration::ZERO, || async {
        Ok::<_, std::io::Error>(Vec::new())
    })
    .unwrap_err();
    assert_eq!(error, PollConfigError::ZeroInterval);
    assert_eq!(error.to_string(), "poll interval must be greater than zero");
}

#[tokio::test(start_paused = true)]
async fn an_interval_too_long_to_jitter_does_not_panic() {
    let world = World::with(&["a"]);
    let source = PollSource::new("forever", Duration::MAX, {
        let world = world.clone();
        move || {
            let world = world.clone();
            async move { Ok::<_, std::io::Error>(world.pods.lock().unwrap().clone()) }
        }
    })
    .unwrap();
    let informer = Informer::builder(source).build().unwrap();
    let running = Running::start(&informer);
    within("the first list", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(informer.cache().len(), 1);
    running.stop().await;
}
