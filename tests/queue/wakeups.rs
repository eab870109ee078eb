//! Wake-ups of dropped gets.

use super::*;

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
