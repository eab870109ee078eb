//! Delayed adds and timers.

use super::*;

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
