//! Payloads merged across adds.

use super::*;

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
