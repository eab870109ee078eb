//! Public behaviour of `WorkQueue`, on tokio's paused clock.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tend::rate_limit::{ExponentialBackoff, TokenBucket};
use tend::{Payload, Priority, QueueKey, QueueObserver, When, WorkQueue};
use tokio::time::{Instant, advance, timeout};

const LIMIT: Duration = Duration::from_secs(3600);

/// The next key, failing the test if none comes within an hour of paused time.
async fn next<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>) -> K {
    next_with_payload(queue).await.0
}

/// [`next`], with its payload.
async fn next_with_payload<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>) -> (K, T) {
    timeout(LIMIT, queue.get_with_payload())
        .await
        .expect("no key was handed out within the time limit")
        .expect("the queue was shut down")
}

/// Asserts that no key is handed out for `wait`.
async fn assert_nothing_for<K: QueueKey, T: Payload>(queue: &WorkQueue<K, T>, wait: Duration) {
    if let Ok(got) = timeout(wait, queue.get()).await {
        panic!("expected no key for {wait:?}, got {got:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn adding_a_queued_key_again_keeps_it_once() {
    let queue = WorkQueue::new();
    queue.add("a");
    queue.add("b");
    queue.add("a");
    assert_eq!(queue.len(), 2);
    assert_eq!(next(&queue).await, "a");
    assert_eq!(next(&queue).await, "b");
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_key_added_while_processed_is_queued_again_after_done() {
    let queue = WorkQueue::new();
    queue.add("a");
    let key = next(&queue).await;
    queue.add("a");
    queue.add("a");
    // Never to a second worker while the first holds it.
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
    assert_eq!(queue.stats().in_flight, 1);
    queue.done(&key).expect("held");
    assert_eq!(next(&queue).await, "a");
    queue.done(&"a").expect("held");
    assert_nothing_for(&queue, Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn done_for_a_key_not_held_is_an_error() {
    let queue = WorkQueue::<&str>::new();
    let err = queue.done(&"ghost").expect_err("not held");
    assert_eq!(err.to_string(), "key \"ghost\" is not being processed");
    queue.add("a");
    let key = next(&queue).await;
    queue.done(&key).expect("held");
    assert!(queue.done(&key).is_err(), "done twice must fail");
}

#[tokio::test(start_paused = true)]
async fn add_after_delays_by_exactly_the_delay() {
    let queue = WorkQueue::new();
    let start = Instant::now();
    queue.add_after("a", Duration::from_millis(250));
    assert_eq!(queue.len(), 0);
    assert_eq!(queue.stats().scheduled, 1);
    assert_eq!(next(&queue).await, "a");
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn the_earliest_deadline_wins() {
    let queue = WorkQueue::new();
    let start = Instant::now();
    queue.add_after("late-then-early", Duration::from_secs(10));
    queue.add_after("late-then-early", Duration::from_secs(5));
    queue.add_after("early-then-late", Duration::from_secs(1));
    queue.add_after("early-then-late", Duration::from_secs(8));
    assert_eq!(queue.stats().scheduled, 2);
    assert_eq!(next(&queue).await, "early-then-late");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(next(&queue).await, "late-then-early");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // Each fired once: the superseded timers do not hand them out again.
    queue.done(&"early-then-late").expect("held");
    queue.done(&"late-then-early").expect("held");
    assert_nothing_for(&queue, Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_delayed_add_of_a_ready_key_does_not_duplicate_it() {
    let queue = WorkQueue::new();
    queue.add("a");
    queue.add_after("a", Duration::from_secs(1));
    assert_eq!(queue.stats().scheduled, 0);
    assert_eq!(next(&queue).await, "a");
    queue.done(&"a").expect("held");
    assert_nothing_for(&queue, Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn an_immediate_add_cancels_a_pending_timer() {
    let queue = WorkQueue::new();
    queue.add_after("a", Duration::from_secs(30));
    queue.add("a");
    assert_eq!(queue.stats().scheduled, 0);
    assert_eq!(next(&queue).await, "a");
    queue.done(&"a").expect("held");
    assert_nothing_for(&queue, Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_sleeping_worker_wakes_for_an_earlier_timer() {
    let queue = WorkQueue::new();
    queue.add_after("late", Duration::from_secs(60));
    let worker = tokio::spawn({
        let queue = queue.clone();
        async move { next(&queue).await }
    });
    tokio::task::yield_now().await;
    let start = Instant::now();
    queue.add_after("soon", Duration::from_secs(1));
    assert_eq!(worker.await.expect("worker"), "soon");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn higher_priorities_first_and_fifo_within_a_level() {
    let queue = WorkQueue::new();
    queue.add_prioritized("low-1", Priority::LOW);
    queue.add("normal-1");
    queue.add_prioritized("high-1", Priority::HIGH);
    queue.add_prioritized("low-2", Priority::LOW);
    queue.add("normal-2");
    queue.add_prioritized("high-2", Priority::HIGH);
    let mut order = Vec::new();
    for _ in 0..6 {
        order.push(next(&queue).await);
    }
    assert_eq!(
        order,
        ["high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_re_add_keeps_the_higher_priority() {
    let queue = WorkQueue::new();
    queue.add_prioritized("raised", Priority::LOW);
    queue.add("normal");
    queue.add_prioritized("raised", Priority::HIGH);
    queue.add_prioritized("kept", Priority::HIGH);
    queue.add_prioritized("kept", Priority::LOW);
    assert_eq!(queue.len(), 3);
    assert_eq!(next(&queue).await, "raised");
    assert_eq!(next(&queue).await, "kept");
    assert_eq!(next(&queue).await, "normal");
}

#[tokio::test(start_paused = true)]
async fn low_priority_keys_are_served_under_a_constant_high_priority_stream() {
    let queue = WorkQueue::builder()
        .max_wait(Duration::from_secs(1))
        .build();
    for i in 0..50u32 {
        queue.add_prioritized(1_000_000 + i, Priority::LOW);
    }
    let mut low_served = 0;
    let mut fresh = 0u32;
    // Two fresh changes arrive for every key served: the high level never empties.
    for _ in 0..2_000 {
        queue.add(fresh);
        queue.add(fresh + 1);
        fresh += 2;
        let key = next(&queue).await;
        if key >= 1_000_000 {
            low_served += 1;
        }
        queue.done(&key).expect("held");
        advance(Duration::from_millis(10)).await;
    }
    assert_eq!(low_served, 50, "every low-priority key must be served");
}

#[tokio::test(start_paused = true)]
async fn aging_never_takes_more_than_half_the_throughput() {
    let queue = WorkQueue::builder().max_wait(Duration::ZERO).build();
    for i in 0..100u32 {
        queue.add_prioritized(1_000 + i, Priority::LOW);
        queue.add(i);
    }
    let mut fresh_in_first_20 = 0;
    for _ in 0..20 {
        if next(&queue).await < 1_000 {
            fresh_in_first_20 += 1;
        }
    }
    assert_eq!(fresh_in_first_20, 10);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_follow_the_exponential_schedule() {
    let backoff = ExponentialBackoff::new(Duration::from_millis(5), Duration::from_millis(100))
        .expect("valid");
    let queue = WorkQueue::builder().rate_limiter(backoff).build();
    let mut delays = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        queue.add_rate_limited("a");
        let key = next(&queue).await;
        delays.push(start.elapsed().as_millis());
        queue.done(&key).expect("held");
    }
    assert_eq!(delays, [5, 10, 20, 40, 80, 100, 100]);
    assert_eq!(queue.retries(&"a"), 7);
    queue.forget(&"a");
    assert_eq!(queue.retries(&"a"), 0);
    let start = Instant::now();
    queue.add_rate_limited("a");
    next(&queue).await;
    assert_eq!(start.elapsed(), Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn a_deduplicated_rate_limited_add_spends_no_token() {
    let per_second = NonZeroU32::new(1).expect("non-zero");
    let burst = NonZeroU32::new(2).expect("non-zero");
    let queue = WorkQueue::builder()
        .rate_limiter(TokenBucket::new(per_second, burst))
        .build();
    let start = Instant::now();
    queue.add_rate_limited("a");
    // Already pending: neither a token nor a failure is spent.
    for _ in 0..10 {
        queue.add_rate_limited("a");
    }
    queue.add_rate_limited("b");
    assert_eq!(queue.len(), 2, "both within the burst of 2");
    assert_eq!(next(&queue).await, "a");
    assert_eq!(next(&queue).await, "b");
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The bucket is now empty: the next distinct key waits one second.
    queue.add_rate_limited("c");
    assert_eq!(next(&queue).await, "c");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

/// A payload for the tests: which of a few reasons a key was added for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Reasons(u8);

impl Payload for Reasons {
    fn merge(&mut self, other: Self) {
        self.0 |= other.0;
    }
}

#[tokio::test(start_paused = true)]
async fn a_keys_payload_merges_every_add_until_it_is_handed_out() {
    let queue = WorkQueue::builder().payload::<Reasons>().build();
    let normal = Priority::NORMAL;
    queue.enqueue("a", When::Now, normal, Reasons(0b0001));
    queue.enqueue("a", When::Now, normal, Reasons(0b0010));
    // A raised priority keeps what the key had.
    queue.enqueue("a", When::Now, Priority::HIGH, Reasons(0b0100));
    // Pending: a rate-limited add only brings its payload.
    let floor = Duration::ZERO;
    queue.enqueue("a", When::Backoff { floor }, normal, Reasons(0b1000));
    assert_eq!(queue.len(), 1);
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0b1111)));
    // While held: for the next hand-out, which starts afresh.
    queue.enqueue("a", When::Now, normal, Reasons(0b1_0000));
    queue.add("a");
    queue.done(&"a").expect("held");
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0b1_0000)));
    queue.done(&"a").expect("held");
    // An add without payload brings the default.
    queue.add("a");
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0)));
}

#[tokio::test(start_paused = true)]
async fn a_timers_payload_counts_only_if_the_timer_makes_the_key_ready() {
    let queue = WorkQueue::builder().payload::<Reasons>().build();
    let (normal, second) = (Priority::NORMAL, Duration::from_secs(1));
    queue.enqueue("a", When::After(second), normal, Reasons(0b01));
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0b01)));
    queue.done(&"a").expect("held");
    // Cancelled by an add that is sooner: its payload goes with it.
    queue.enqueue("a", When::After(second), normal, Reasons(0b01));
    queue.enqueue("a", When::Now, normal, Reasons(0b10));
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0b10)));
    queue.done(&"a").expect("held");
    assert_nothing_for(&queue, 2 * second).await;
    // A later timer does not replace one due sooner, nor adds to it.
    queue.enqueue("a", When::After(second), normal, Reasons(0b01));
    queue.enqueue("a", When::After(2 * second), normal, Reasons(0b10));
    assert_eq!(next_with_payload(&queue).await, ("a", Reasons(0b01)));
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiting_worker_and_drops_queued_keys() {
    let queue = WorkQueue::<u32>::new();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    queue.shutdown();
    for worker in workers {
        let got = timeout(Duration::from_secs(1), worker)
            .await
            .expect("a waiting worker was not woken by shutdown")
            .expect("worker");
        assert_eq!(got, None);
    }

    let queue = WorkQueue::new();
    queue.add(1);
    queue.add(2);
    queue.add_after(3, Duration::from_secs(5));
    queue.shutdown();
    assert_eq!(queue.stats().dropped, 3);
    assert_eq!(queue.get().await, None);
    queue.add(4);
    assert_eq!(queue.len(), 0, "adds after shutdown are ignored");
    assert!(queue.is_shut_down());
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_waits_for_in_flight_keys() {
    let queue = WorkQueue::new();
    queue.add("a");
    queue.add("b");
    let key = next(&queue).await;
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move {
            let start = Instant::now();
            queue.shutdown_with_drain().await;
            start.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!drain.is_finished(), "drain returned with a key in flight");
    assert_eq!(queue.get().await, None, "workers see None at once");
    queue.done(&key).expect("done is allowed during drain");
    let waited = timeout(Duration::from_secs(1), drain)
        .await
        .expect("drain did not return after the last done")
        .expect("drain task");
    assert_eq!(waited, Duration::from_secs(3));
    assert_eq!(queue.stats().dropped, 1, "b was queued and is dropped");
}

#[tokio::test(start_paused = true)]
async fn a_later_shutdown_cuts_a_drain_short() {
    let queue = WorkQueue::new();
    queue.add("stuck");
    let _held = next(&queue).await;
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shutdown_with_drain().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!drain.is_finished());
    queue.shutdown();
    timeout(Duration::from_secs(1), drain)
        .await
        .expect("a later shutdown must end the drain")
        .expect("drain task");
}

/// A waker that records whether it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Flag {
    fn woken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Polls `get` once with a waker of its own.
fn poll_once<F: Future>(get: Pin<&mut F>, flag: &Arc<Flag>) -> Poll<F::Output> {
    get.poll(&mut Context::from_waker(&Waker::from(Arc::clone(flag))))
}

#[tokio::test(start_paused = true)]
async fn a_get_woken_then_dropped_before_its_next_poll_passes_the_key_on() {
    let queue = WorkQueue::new();
    let (first, second) = (queue.get(), queue.get());
    let (mut first, mut second) = (Box::pin(first), Box::pin(second));
    let flags = [Arc::new(Flag::default()), Arc::new(Flag::default())];
    assert!(poll_once(first.as_mut(), &flags[0]).is_pending());
    assert!(poll_once(second.as_mut(), &flags[1]).is_pending());
    queue.add("a");
    let woken: Vec<bool> = flags.iter().map(|f| f.woken()).collect();
    assert_eq!(woken.iter().filter(|w| **w).count(), 1, "woken: {woken:?}");
    // Drop the woken get without polling it again; the other must be woken
    // in its place and take the key.
    let (mut other, other_flag) = if woken[0] {
        drop(first);
        (second, &flags[1])
    } else {
        drop(second);
        (first, &flags[0])
    };
    assert!(
        other_flag.woken(),
        "the wake-up of the dropped get was not passed on"
    );
    assert_eq!(
        poll_once(other.as_mut(), other_flag),
        Poll::Ready(Some("a"))
    );
}

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

#[tokio::test(start_paused = true)]
async fn a_drain_after_a_shutdown_still_waits_for_in_flight_keys() {
    let queue = WorkQueue::new();
    queue.add("a");
    let key = next(&queue).await;
    queue.shutdown();
    let drains: Vec<_> = (0..2)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.shutdown_with_drain().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        drains.iter().all(|d| !d.is_finished()),
        "a drain returned early"
    );
    queue.done(&key).expect("held");
    for drain in drains {
        timeout(Duration::from_secs(1), drain)
            .await
            .expect("the drain did not end after the last done")
            .expect("drain task");
    }
}

/// Workers that hold every key for an hour, recording when they got it.
fn hoarders(
    queue: &WorkQueue<&'static str>,
    n: usize,
) -> Arc<std::sync::Mutex<Vec<(&'static str, Duration)>>> {
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    for _ in 0..n {
        let (queue, got) = (queue.clone(), Arc::clone(&got));
        tokio::spawn(async move {
            while let Some(key) = queue.get().await {
                got.lock()
                    .expect("not poisoned")
                    .push((key, start.elapsed()));
                tokio::time::sleep(Duration::from_secs(3600)).await;
                queue.done(&key).expect("held");
            }
        });
    }
    got
}

#[tokio::test(start_paused = true)]
async fn a_later_timer_fires_on_time_while_the_worker_that_watched_timers_is_busy() {
    let queue = WorkQueue::new();
    let got = hoarders(&queue, 4);
    tokio::task::yield_now().await;
    queue.add_after("a", Duration::from_secs(10));
    queue.add_after("b", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let got = got.lock().expect("not poisoned").clone();
    assert_eq!(
        got,
        [
            ("a", Duration::from_secs(10)),
            ("b", Duration::from_secs(20))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn timers_due_together_go_to_as_many_idle_workers() {
    let queue = WorkQueue::new();
    let got = hoarders(&queue, 4);
    tokio::task::yield_now().await;
    for key in ["a", "b", "c"] {
        queue.add_after(key, Duration::from_secs(10));
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let got = got.lock().expect("not poisoned").clone();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got.iter().all(|(_, at)| *at == Duration::from_secs(10)),
        "{got:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_background_add_does_not_demote_a_pending_timer() {
    let queue = WorkQueue::new();
    queue.add_after("retry", Duration::from_secs(5));
    queue.add_prioritized("retry", Priority::LOW);
    queue.add("fresh");
    // The retry keeps normal priority: FIFO with the fresh change.
    assert_eq!(next(&queue).await, "retry");
    assert_eq!(next(&queue).await, "fresh");
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
