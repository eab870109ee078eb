//! Rate-limited adds.

use super::*;

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
