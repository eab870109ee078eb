//! The keys of slots gained: when this replica gains a shard, a sharded
//! controller queues the shard's cached keys, and the keys of its recent
//! deletions with their last states (see `departed`), at the background
//! priority (`Trigger::Acquired`).

use std::sync::Arc;

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::Trigger;
use super::departed::Departed;
use super::external;
use super::last_states::LastStates;
use super::ownership::Ownership;
use super::sink::Enqueue;
use crate::informer::Cache;
use crate::object::Object;
use crate::shard::Shard;

/// What a sharded controller's feed reads and writes.
pub(super) struct Feed<O: Object> {
    pub(super) sink: Enqueue<O::Key>,
    pub(super) store: Cache<O>,
    pub(super) departed: Arc<Departed<O>>,
    pub(super) last_states: Arc<LastStates<O>>,
    /// The ownership's announcements of slots gained, subscribed before
    /// the controller's informers were: a slot gained before that is
    /// covered by their first replay, which is filtered by what is owned
    /// then.
    pub(super) gains: broadcast::Receiver<Arc<[Shard]>>,
    pub(super) ownership: Ownership<O::Key>,
}

impl<O: Object> Feed<O> {
    /// Queues the keys of every slot announced as gained, until `stop`.
    pub(super) async fn run(mut self, stop: CancellationToken) {
        loop {
            let gained = match stop.run_until_cancelled(self.gains.recv()).await {
                None | Some(Err(RecvError::Closed)) => return,
                Some(Ok(gained)) => gained,
                // Announcements were missed: every owned slot may be new.
                Some(Err(RecvError::Lagged(_))) => self.ownership.owned_slots().into(),
            };
            self.queue_slots(&gained);
        }
    }

    /// Queues the cached keys of `gained` and their recent deletions.
    fn queue_slots(&self, gained: &[Shard]) {
        let ownership = &self.ownership;
        let mut wanted = vec![false; ownership.slot_count().shards().len()];
        for slot in gained {
            if let Some(wanted) = usize::try_from(slot.index())
                .ok()
                .and_then(|i| wanted.get_mut(i))
            {
                *wanted = true;
            }
        }
        let keep = |key: &O::Key| {
            let slot = ownership.slot(key).index();
            usize::try_from(slot).is_ok_and(|i| wanted.get(i) == Some(&true))
        };
        external::enqueue_where(&self.sink, &self.store, Trigger::Acquired, keep);
        let exists = |key: &O::Key| self.store.get(key).is_some();
        let gone = self.departed.take_where(keep, exists, |key, last| {
            self.last_states.deleted(key.clone(), last);
        });
        external::enqueue_keys(&self.sink, gone, Trigger::Acquired);
    }
}
