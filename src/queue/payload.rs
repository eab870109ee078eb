//! What a key carries through the queue besides itself.

use std::fmt::Debug;

/// Per-key data that travels with a key through a [`WorkQueue`](crate::WorkQueue),
/// merged by every add that lands on the key: the "why" of its next hand-out.
///
/// Each add brings a payload ([`WorkQueue::enqueue`](crate::WorkQueue::enqueue));
/// the queue merges it into the key's pending state (ready, scheduled, or
/// dirty while a worker holds the key) and hands the merged payload out
/// with the key ([`WorkQueue::get_with_payload`](crate::WorkQueue::get_with_payload)),
/// starting afresh from [`Default::default`] for the next one. A timer's
/// payload counts only if that timer is what makes the key ready: an add
/// that makes the key ready sooner cancels the timer and its payload (a
/// debounced change's timer excepted: its payload records changes that
/// happened, and is kept). A key handed back unstarted keeps its payload.
///
/// The controller's queue carries [`Triggers`](crate::controller::Triggers)
/// this way; a queue built with [`WorkQueue::new`](crate::WorkQueue::new)
/// carries `()`, which merges to nothing. No side map is needed, so the
/// payload can never be out of step with the key's state.
///
/// # Contract
///
/// - `merge` is associative and commutative, with `Default::default()` as
///   its identity (a bit set under OR, a maximum, a saturating count): the
///   queue merges in whatever order its state changes require.
/// - `merge` runs under the queue's lock, in the middle of a change of the
///   key's state: it must be cheap, must not call the queue, and must not
///   panic.
/// - The payload is stored in the key's slot, so its size is memory per key:
///   keep it small (a slot is 32 bytes with a payload of up to 4 bytes).
///
/// # Examples
///
/// A queue whose keys say which kinds of change they wait for:
///
/// ```
/// use tend::{Payload, Priority, When, WorkQueue};
///
/// #[derive(Debug, Clone, Copy, Default, PartialEq)]
/// struct Changes { spec: bool, status: bool }
///
/// impl Payload for Changes {
///     fn merge(&mut self, other: Self) {
///         self.spec |= other.spec;
///         self.status |= other.status;
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let queue = WorkQueue::builder().payload::<Changes>().build();
/// let spec = Changes { spec: true, status: false };
/// let status = Changes { spec: false, status: true };
/// queue.enqueue("web", When::Now, Priority::NORMAL, spec);
/// queue.enqueue("web", When::Now, Priority::NORMAL, status); // deduplicated, merged
/// let (key, changes) = queue.get_with_payload().await.unwrap();
/// assert_eq!((key, changes), ("web", Changes { spec: true, status: true }));
/// # }
/// ```
pub trait Payload: Copy + Default + Debug + Send + Sync + 'static {
    /// Merges `other` (a later add's payload) into `self`.
    fn merge(&mut self, other: Self);
}

/// No payload: what [`WorkQueue::new`](crate::WorkQueue::new) builds.
impl Payload for () {
    fn merge(&mut self, (): Self) {}
}

/// `a` merged with `b`.
pub(super) fn merged<T: Payload>(mut a: T, b: T) -> T {
    a.merge(b);
    a
}
