//! Triggers from outside the informers: a stream of keys (a channel, a
//! webhook handler) or a stream of "re-check everything" signals (a timer, a
//! configuration reload), each reconcile reporting [`Trigger::External`].

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::Trigger;
use super::sink::Enqueue;
use crate::informer::Cache;
use crate::object::Object;

/// How many keys a trigger adds under one lock, so workers are not locked
/// out of the queue for long.
const RUN: usize = 256;

/// A stream that asks for reconciles.
pub(crate) enum External<K> {
    /// Reconcile each key.
    Keys(BoxStream<'static, K>),
    /// Reconcile every cached primary key, once per item.
    All(BoxStream<'static, ()>),
}

impl<K: crate::QueueKey> External<K> {
    /// Feeds the queue until the stream ends or `stop` is cancelled. Keys
    /// go in at normal priority; "all keys" at the background priority, as
    /// a resync does, so fresh changes are not queued behind everything.
    pub(super) async fn feed<O: Object<Key = K>>(
        self,
        sink: Enqueue<K>,
        store: Cache<O>,
        stop: CancellationToken,
    ) {
        match self {
            Self::Keys(keys) => {
                // Whatever is ready goes in under one lock.
                let mut runs = keys.ready_chunks(RUN);
                while let Some(Some(mut run)) = stop.run_until_cancelled(runs.next()).await {
                    // Filtered before the queue's lock: `ShardKey` is user code.
                    run.retain(|key| sink.wants(key));
                    let entries = run
                        .into_iter()
                        .map(|key| sink.entry(key, Trigger::External, false));
                    sink.queue.add_many(entries);
                }
            }
            Self::All(mut signals) => {
                while let Some(Some(())) = stop.run_until_cancelled(signals.next()).await {
                    enqueue_all(&sink, &store, Trigger::External);
                }
            }
        }
    }
}

/// Queues every cached primary key (sharded: of the owned shards) at the
/// background priority, in runs. The keys are the cache's: `Object::key`
/// (user code) is not called.
pub(super) fn enqueue_all<O: Object>(sink: &Enqueue<O::Key>, store: &Cache<O>, trigger: Trigger) {
    enqueue_where(sink, store, trigger, |key| sink.wants(key));
}

/// Queues the cached primary keys `keep` passes (called before the
/// queue's lock) at the background priority, in runs.
pub(super) fn enqueue_where<O: Object>(
    sink: &Enqueue<O::Key>,
    store: &Cache<O>,
    trigger: Trigger,
    keep: impl Fn(&O::Key) -> bool,
) {
    let mut keys = store.keys();
    keys.retain(|key| keep(key));
    enqueue_keys(sink, keys, trigger);
}

/// Queues `keys` at the background priority, in runs.
pub(super) fn enqueue_keys<K: crate::QueueKey>(sink: &Enqueue<K>, keys: Vec<K>, trigger: Trigger) {
    let mut keys = keys.into_iter().peekable();
    while keys.peek().is_some() {
        let run = keys.by_ref().take(RUN);
        sink.queue
            .add_many(run.map(|key| sink.entry(key, trigger, true)));
    }
}
