//! In-flight listing and observers.

use super::*;

#[tokio::test(start_paused = true)]
async fn in_flight_keys_are_listed_oldest_first_with_their_age() {
    let queue = WorkQueue::new();
    queue.add("old");
    let _old = next(&queue).await;
    advance(Duration::from_secs(30)).await;
    queue.add("new");
    let _new = next(&queue).await;
    advance(Duration::from_secs(5)).await;
    let in_flight = queue.in_flight();
    let view: Vec<_> = in_flight.iter().map(|k| (k.key, k.age)).collect();
    assert_eq!(
        view,
        [
            ("old", Duration::from_secs(35)),
            ("new", Duration::from_secs(5))
        ]
    );
    let stats = queue.stats();
    assert_eq!(stats.longest_running, Some(Duration::from_secs(35)));
    assert_eq!(stats.unfinished_work, Duration::from_secs(40));
}

#[derive(Default)]
struct Recorder {
    added: AtomicUsize,
    depth: AtomicUsize,
    queued_ms: AtomicU64,
    worked_ms: AtomicU64,
    retried: AtomicUsize,
    dropped: AtomicU64,
}

impl QueueObserver for Recorder {
    fn added(&self) {
        self.added.fetch_add(1, Ordering::Relaxed);
    }
    fn depth(&self, ready: usize) {
        self.depth.store(ready, Ordering::Relaxed);
    }
    fn queued_for(&self, waited: Duration) {
        self.queued_ms
            .fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
    }
    fn worked_for(&self, worked: Duration) {
        self.worked_ms
            .fetch_add(worked.as_millis() as u64, Ordering::Relaxed);
    }
    fn retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }
    fn dropped(&self, keys: u64) {
        self.dropped.fetch_add(keys, Ordering::Relaxed);
    }
}

#[tokio::test(start_paused = true)]
async fn the_observer_sees_adds_depth_durations_retries_and_drops() {
    let recorder = Arc::new(Recorder::default());
    let queue = WorkQueue::builder().observer(recorder.clone()).build();
    queue.add("a");
    queue.add("a");
    queue.add("b");
    assert_eq!(
        recorder.added.load(Ordering::Relaxed),
        2,
        "dedup not counted"
    );
    assert_eq!(recorder.depth.load(Ordering::Relaxed), 2);
    advance(Duration::from_millis(40)).await;
    let key = next(&queue).await;
    assert_eq!(recorder.queued_ms.load(Ordering::Relaxed), 40);
    assert_eq!(recorder.depth.load(Ordering::Relaxed), 1);
    advance(Duration::from_millis(25)).await;
    queue.add_rate_limited(key);
    queue.done(&key).expect("held");
    assert_eq!(recorder.worked_ms.load(Ordering::Relaxed), 25);
    assert_eq!(recorder.retried.load(Ordering::Relaxed), 1);
    let fired = next(&queue).await;
    let timer = next(&queue).await;
    assert_eq!((fired, timer), ("b", "a"));
    assert_eq!(
        recorder.added.load(Ordering::Relaxed),
        3,
        "a timer firing is an add"
    );
    queue.add("c");
    queue.shutdown();
    assert_eq!(recorder.dropped.load(Ordering::Relaxed), 1);
}

/// Panics in every callback.
struct Panicking;

impl QueueObserver for Panicking {
    fn added(&self) {
        panic!("added");
    }
    fn depth(&self, _ready: usize) {
        panic!("depth");
    }
    fn queued_for(&self, _waited: Duration) {
        panic!("queued_for");
    }
    fn worked_for(&self, _worked: Duration) {
        panic!("worked_for");
    }
    fn retried(&self) {
        panic!("retried");
    }
    fn dropped(&self, _keys: u64) {
        panic!("dropped");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_observer_neither_strands_nor_loses_keys() {
    let queue = WorkQueue::builder().observer(Arc::new(Panicking)).build();
    queue.add("a");
    queue.add("b");
    let a = next(&queue).await;
    queue.add(a); // dirty
    queue.done(&a).expect("held");
    queue.add_rate_limited("c");
    queue.add_after("d", Duration::from_secs(1));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let key = next(&queue).await;
        queue.done(&key).expect("held");
        seen.push(key);
    }
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d"]);
    assert_eq!(queue.stats().in_flight, 0);
    queue.add("e");
    queue.shutdown();
    assert_eq!(queue.stats().dropped, 1);
}

/// A timer that fires for a key in flight marks it dirty: an add the
/// observer counts, even when the look that fired it found nothing ready.
#[tokio::test(start_paused = true)]
async fn a_timer_firing_for_a_key_in_flight_is_counted_as_an_add() {
    let recorder = Arc::new(Recorder::default());
    let queue = WorkQueue::builder().observer(recorder.clone()).build();
    queue.add("a");
    let a = next(&queue).await;
    queue.add_after(a, Duration::from_secs(1));
    advance(Duration::from_secs(1)).await;
    // Another worker looks: the timer fires, "a" is dirty, nothing is ready.
    assert!(
        timeout(Duration::from_millis(1), queue.get())
            .await
            .is_err(),
        "nothing ready"
    );
    assert_eq!(recorder.added.load(Ordering::Relaxed), 2);
    queue.done(&a).expect("held");
    assert_eq!(next(&queue).await, "a", "queued again after done");
}
