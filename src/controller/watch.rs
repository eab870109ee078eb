//! How events become keys: the primary's handler and secondary sources
//! (`owns`, `watches`) mapped to primary keys.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::context::Caches;
use super::departed::Departed;
use super::last_states::LastStates;
use super::shards::{Claim, KeyShards};
use super::{Predicate, Trigger, Triggers};
use crate::informer::{Event, Handler, Informer, InformerError, Subscription};
use crate::queue::{Add, Priority, When, WorkQueue};
use crate::source::Object;

/// A source a controller subscribes to, with an optional predicate.
///
/// An [`Informer`] converts into a `Watch` with no predicate, so
/// `.owns(pods, …)` and `.owns(Watch::new(pods).predicate(p), …)` both work.
pub struct Watch<P: Object> {
    informer: Informer<P>,
    predicate: Option<Predicate<P>>,
}

impl<P: Object> Watch<P> {
    /// Every event of `informer`.
    #[must_use]
    pub fn new(informer: Informer<P>) -> Self {
        Self {
            informer,
            predicate: None,
        }
    }

    /// Only the events `predicate` passes (combine predicates with
    /// [`Predicate::and`] rather than calling this twice: the last call wins).
    ///
    /// On an owned or mapped source the predicate sees the event before it
    /// is mapped: an update it drops enqueues no key, not even the old owner
    /// of an object that changed owner. Keep owner changes visible (e.g. with
    /// [`Predicate::version_changed`]) where owners move.
    #[must_use]
    pub fn predicate(mut self, predicate: Predicate<P>) -> Self {
        self.predicate = Some(predicate);
        self
    }
}

impl<P: Object> From<Informer<P>> for Watch<P> {
    fn from(informer: Informer<P>) -> Self {
        Self::new(informer)
    }
}

impl<P: Object> fmt::Debug for Watch<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("source", &self.informer.name())
            .field("filtered", &self.predicate.is_some())
            .finish()
    }
}

/// Puts keys into the controller's queue, with why: the queue carries each
/// key's triggers (its payload) to the reconcile that handles them.
/// A sharded controller's sink queues only keys of the shards the replica
/// owns (checked before the queue's lock: `ShardKey` is user code).
pub(crate) struct Enqueue<K: crate::QueueKey> {
    pub(crate) queue: WorkQueue<K, Triggers>,
    pub(crate) background: Priority,
    pub(crate) shards: Option<KeyShards<K>>,
}

impl<K: crate::QueueKey> Clone for Enqueue<K> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            background: self.background,
            shards: self.shards.clone(),
        }
    }
}

/// A key this replica may not reconcile now: its shard is not owned.
pub(crate) struct NotOwned;

impl<K: crate::QueueKey> Enqueue<K> {
    /// Whether `key` may be queued: always, unless sharded and its shard is
    /// not owned.
    pub(crate) fn wants(&self, key: &K) -> bool {
        super::shards::wanted(self.shards.as_ref(), key)
    }

    /// Counts a reconcile of `key` against its shard: `Ok(None)` when not
    /// sharded, `Err` when the shard is not owned (the key is skipped).
    pub(crate) fn claim(&self, key: &K) -> Result<Option<Claim>, NotOwned> {
        match &self.shards {
            None => Ok(None),
            Some(shards) => shards
                .owned
                .claim(shards.shard(key))
                .map(Some)
                .ok_or(NotOwned),
        }
    }

    /// What to queue for `key`: the background priority for initial lists
    /// and resyncs (so fresh changes go first), else normal priority and
    /// debounced (when the controller debounces: background keys are not
    /// bursts).
    pub(crate) fn entry(&self, key: K, trigger: Trigger, background: bool) -> Add<K, Triggers> {
        let priority = if background {
            self.background
        } else {
            Priority::NORMAL
        };
        Add {
            key,
            priority,
            payload: trigger.into(),
            debounced: !background,
        }
    }

    /// Queues `key` after `delay` (a requeue) at the priority it ran at;
    /// `trigger` is reported only if this timer is what runs the key (an
    /// earlier run cancels it).
    pub(crate) fn push_after(&self, key: K, trigger: Trigger, delay: Duration, priority: Priority) {
        self.queue
            .enqueue(key, When::After(delay), priority, trigger.into());
    }

    /// Queues `key` after its rate limiter's delay (a retry, or a requeue
    /// with backoff) at the priority it ran at, so a failing background key
    /// does not crowd out fresh changes; at least
    /// [`Action::MIN_REQUEUE_DELAY`]: a limiter that answers zero (a token
    /// bucket within its burst) must not make a failing key a busy loop.
    pub(crate) fn push_backoff(&self, key: K, trigger: Trigger, priority: Priority) {
        let floor = super::Action::MIN_REQUEUE_DELAY;
        self.queue
            .enqueue(key, When::Backoff { floor }, priority, trigger.into());
    }
}

/// An informer handler that gathers the keys a run of events asks for and
/// adds them to the queue under one lock when the informer flushes (before
/// it waits for anything, so no latency is added).
struct Gather<K: crate::QueueKey, F> {
    sink: Enqueue<K>,
    keys: Keys<K>,
    on_event: F,
    /// The key the last (settled) flush kept back.
    held: Option<K>,
}

/// The keys gathered since the last flush.
pub(crate) struct Keys<K> {
    pending: Vec<(K, Trigger, bool)>,
    shards: Option<KeyShards<K>>,
}

impl<K> Keys<K> {
    /// Whether `key` may be queued (sharded: its shard is owned).
    fn wants(&self, key: &K) -> bool {
        super::shards::wanted(self.shards.as_ref(), key)
    }

    /// Asks for `key` to be reconciled because of `trigger`, at the
    /// background priority if `background`, if it is wanted.
    fn push(&mut self, key: K, trigger: Trigger, background: bool) {
        if self.wants(&key) {
            self.push_wanted(key, trigger, background);
        }
    }

    /// [`push`](Self::push) for a key [`wants`](Self::wants) passed.
    fn push_wanted(&mut self, key: K, trigger: Trigger, background: bool) {
        self.pending.push((key, trigger, background));
    }
}

impl<K: crate::QueueKey, F> Gather<K, F> {
    fn new(sink: Enqueue<K>, on_event: F) -> Self {
        let shards = sink.shards.clone();
        Self {
            sink,
            keys: Keys {
                pending: Vec::new(),
                shards,
            },
            on_event,
            held: None,
        }
    }

    fn flush_keys(&mut self) {
        self.held = None;
        if self.keys.pending.is_empty() {
            return;
        }
        let sink = &self.sink;
        sink.queue.add_many(
            self.keys
                .pending
                .drain(..)
                .map(|(key, trigger, background)| sink.entry(key, trigger, background)),
        );
    }
}

impl<P, K, F> Handler<P> for Gather<K, F>
where
    P: Object,
    K: crate::QueueKey,
    F: FnMut(&P::Key, &Event<P>, &mut Keys<K>) + Send,
{
    fn event(&mut self, key: &P::Key, event: &Event<P>) {
        (self.on_event)(key, event, &mut self.keys);
    }

    fn flush(&mut self) {
        self.flush_keys();
    }

    /// Keeps the last event's key back (its burst may go on), unless it was
    /// kept back last time too: a key that changes without end still
    /// reaches the queue at every other flush.
    fn flush_settled(&mut self) {
        let Some((tail, ..)) = self.keys.pending.last() else {
            return;
        };
        // Compared here, not under the queue's lock: `Eq` is user code.
        if self.held.as_ref() == Some(tail) {
            return self.flush_keys();
        }
        let tail = tail.clone();
        let (kept, ready): (Vec<_>, Vec<_>) = std::mem::take(&mut self.keys.pending)
            .into_iter()
            .partition(|(key, ..)| *key == tail);
        self.keys.pending = ready;
        self.flush_keys();
        self.keys.pending = kept;
        self.held = Some(tail);
    }
}

impl<K: crate::QueueKey, F> Drop for Gather<K, F> {
    fn drop(&mut self) {
        // Unsubscribed between an event and its flush: nothing is lost.
        self.flush_keys();
    }
}

/// A subscription whose sync can be awaited without knowing its type.
pub(crate) trait Synced: Send + Sync {
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), InformerError>>;
}

impl<P: Object> Synced for Subscription<P> {
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), InformerError>> {
        Box::pin(Subscription::wait_synced(self, timeout))
    }
}

/// The primary source: each object's own key, as the informer computed it
/// (`Object::key` is not called again). A deletion that passes the
/// predicate leaves the object's last state in `last_states` for the key's
/// reconcile; a creation forgets it. Sharded, every shard's deletions are
/// kept in `departed` too, for the shards this replica gains later.
pub(crate) fn subscribe_primary<O: Object>(
    watch: &Watch<O>,
    sink: Enqueue<O::Key>,
    (last_states, departed): (Arc<LastStates<O>>, Option<Arc<Departed<O>>>),
) -> Box<dyn Synced>
where
    O::Key: crate::QueueKey,
{
    let predicate = watch.predicate.clone();
    let on_event = move |key: &O::Key, event: &Event<O>, keys: &mut Keys<O::Key>| {
        if predicate.as_ref().is_some_and(|p| !p.matches(event)) {
            return;
        }
        if let (Some(departed), Event::Deleted(last)) = (&departed, event) {
            departed.deleted(key.clone(), last);
        }
        // Another replica's key leaves no last state here.
        if !keys.wants(key) {
            return;
        }
        let key = key.clone();
        let trigger = match event {
            Event::Initial(_) => Trigger::Initial,
            Event::Applied { .. } => Trigger::Changed,
            Event::Deleted(last) => {
                last_states.deleted(key.clone(), last);
                Trigger::Deleted
            }
            Event::Resync(_) => Trigger::Resync,
        };
        if matches!(event, Event::Initial(_) | Event::Applied { .. }) {
            last_states.forget(&key);
        }
        keys.push_wanted(key, trigger, is_background(event));
    };
    Box::new(
        watch
            .informer
            .subscribe_handler(Gather::new(sink, on_event)),
    )
}

/// Maps a secondary object to the primary keys it concerns.
pub(crate) type KeyMap<P, K> = Arc<dyn Fn(&P) -> Vec<K> + Send + Sync>;

/// A secondary source (`owns` or `watches`), with its type erased.
pub(crate) trait Secondary<K: crate::QueueKey>: Send + Sync {
    fn subscribe(&self, sink: Enqueue<K>) -> Box<dyn Synced>;
    fn add_cache(&self, caches: &mut Caches);
}

pub(crate) struct Mapped<P: Object, K> {
    pub(crate) watch: Watch<P>,
    pub(crate) map: KeyMap<P, K>,
    pub(crate) trigger: Trigger,
}

impl<P: Object, K: crate::QueueKey> Secondary<K> for Mapped<P, K> {
    fn subscribe(&self, sink: Enqueue<K>) -> Box<dyn Synced> {
        let map = Arc::clone(&self.map);
        let predicate = self.watch.predicate.clone();
        let trigger = self.trigger;
        // The object's own key is not what is queued: the map gives owners'.
        let on_event = move |_: &P::Key, event: &Event<P>, sink: &mut Keys<K>| {
            if predicate.as_ref().is_some_and(|p| !p.matches(event)) {
                return;
            }
            let background = is_background(event);
            let mut keys = map(event.object());
            // An update that moved the object to another owner concerns both.
            if let Event::Applied { old: Some(old), .. } = event {
                for key in map(old) {
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
            for key in keys {
                sink.push(key, trigger, background);
            }
        };
        Box::new(
            self.watch
                .informer
                .subscribe_handler(Gather::new(sink, on_event)),
        )
    }

    fn add_cache(&self, caches: &mut Caches) {
        caches.push(self.watch.informer.store());
    }
}

impl<P: Object> Watch<P> {
    pub(crate) fn informer(&self) -> &Informer<P> {
        &self.informer
    }
}

/// Initial lists and resyncs re-check what may not have changed: background work.
fn is_background<P>(event: &Event<P>) -> bool {
    matches!(event, Event::Initial(_) | Event::Resync(_))
}
