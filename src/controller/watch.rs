//! How events become keys: the primary's handler and secondary sources
//! (`owns`, `watches`) mapped to primary keys.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::context::Caches;
use super::departed::Departed;
use super::last_states::LastStates;
use super::reads::{Remember, Tracker};
use super::sink::{Enqueue, Keys};
use super::{Predicate, Trigger};
use crate::informer::{
    CacheLag, Event, Handler, Informer, InformerError, InformerId, Subscription,
};
use crate::object::Object;

/// A source a controller subscribes to, with an optional predicate.
///
/// An [`Informer`] converts into a `Watch` with no predicate, so
/// `.owns(pods, …)` and `.owns(Watch::new(pods).predicate(p), …)` both work.
///
/// # Examples
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # use tend::Revision;
/// # #[derive(Clone, Debug)] struct Set { name: String, version: Revision }
/// # tend::impl_object!(Set, key: name: String, version: version);
/// # #[derive(Clone, Debug)] struct Pod { name: String, set: String, version: Revision }
/// # tend::impl_object!(Pod, key: name: String, version: version);
/// # struct Scale;
/// # impl Reconciler<Set> for Scale {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Set>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// use tend::controller::{Controller, Predicate, Watch};
/// use tend::memory::MemoryStore;
/// use tend::Informer;
///
/// let sets = Informer::builder(MemoryStore::<Set>::new("sets")).build()?;
/// let pods = Informer::builder(MemoryStore::<Pod>::new("pods")).build()?;
/// let pod_changes = Watch::new(pods.clone()).predicate(Predicate::version_changed());
/// let controller = Controller::builder("sets", &sets, Scale)
///     .owns(pod_changes, |pod: &Pod| Some(pod.set.clone()))
///     .build()?;
/// assert_eq!(controller.required_informers(), [sets.id(), pods.id()]);
///
/// // Optional: reconciles start without waiting for the pods' cache.
/// let lenient = Controller::builder("sets-lenient", &sets, Scale)
///     .owns(Watch::new(pods.clone()).optional(), |pod: &Pod| Some(pod.set.clone()))
///     .build()?;
/// assert_eq!(lenient.required_informers(), [sets.id()]);
/// assert_eq!(lenient.informers(), [sets.id(), pods.id()]); // still read, and run
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Watch<P: Object> {
    informer: Informer<P>,
    predicate: Option<Predicate<P>>,
    optional: bool,
}

impl<P: Object> Watch<P> {
    /// Every event of `informer`.
    #[must_use]
    pub fn new(informer: Informer<P>) -> Self {
        Self {
            informer,
            predicate: None,
            optional: false,
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

impl<P: Object> Watch<P> {
    /// Lets the controller start without this source: its reconciles do
    /// not wait for it to sync, and [`Context::cache`](super::Context::cache)
    /// answers `None` for its type until it has (for a source that may not
    /// answer yet, such as a custom resource whose definition is installed
    /// later). Its events are queued from its first list on. A primary
    /// source is never optional: this flag is ignored there.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }
}

impl<P: Object> Clone for Watch<P> {
    fn clone(&self) -> Self {
        Self {
            informer: self.informer.clone(),
            predicate: self.predicate.clone(),
            optional: self.optional,
        }
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
            .field("optional", &self.optional)
            .finish()
    }
}

/// Entries a [`Gather`]'s buffer keeps room for, at most, between flushes.
const KEPT_CAPACITY: usize = 1024;

/// An informer handler that gathers the keys a run of events asks for and
/// adds them to the queue under one lock when the informer flushes (before
/// it waits for anything, so no latency is added).
pub(super) struct Gather<K: crate::QueueKey, F> {
    sink: Enqueue<K>,
    keys: Keys<K>,
    on_event: F,
    /// The key the last (settled) flush kept back.
    held: Option<K>,
    /// Its entries, while the others are flushed.
    kept: Vec<(K, Trigger, bool)>,
}

impl<K: crate::QueueKey, F> Gather<K, F> {
    pub(super) fn new(sink: Enqueue<K>, on_event: F) -> Self {
        let keys = Keys::new(sink.ownership.clone());
        Self {
            sink,
            keys,
            on_event,
            held: None,
            kept: Vec::new(),
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
        // A whole list's buffer is not kept for the runs after it.
        self.keys.pending.shrink_to(KEPT_CAPACITY);
    }
}

impl<P, K, F> Handler<P> for Gather<K, F>
where
    P: Object,
    K: crate::QueueKey,
    F: FnMut(Cow<'_, P::Key>, &Event<P>, &mut Keys<K>) + Send,
{
    fn event(&mut self, key: &P::Key, event: &Event<P>) {
        (self.on_event)(Cow::Borrowed(key), event, &mut self.keys);
    }

    fn event_owned(&mut self, key: P::Key, event: &Event<P>) {
        (self.on_event)(Cow::Owned(key), event, &mut self.keys);
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
        // Moved aside and back, so that `pending` keeps its buffer (up to
        // `KEPT_CAPACITY`): a run of events then pushes into it without
        // growing it again.
        self.kept
            .extend(self.keys.pending.extract_if(.., |(key, ..)| *key == tail));
        self.flush_keys();
        self.keys.pending.append(&mut self.kept);
        self.kept.shrink_to(KEPT_CAPACITY);
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
    /// Whether the controller starts without waiting for it.
    fn optional(&self) -> bool {
        false
    }
}

impl<P: Object> Synced for Subscription<P> {
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), InformerError>> {
        Box::pin(Subscription::wait_synced(self, timeout))
    }
}

/// A subscription to an optional source: never waited for.
struct Optional<P: Object>(Subscription<P>);

impl<P: Object> Synced for Optional<P> {
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'_, Result<(), InformerError>> {
        Box::pin(Subscription::wait_synced(&self.0, timeout))
    }

    fn optional(&self) -> bool {
        true
    }
}

/// Where the primary's deletions go: the last states for the key's own
/// reconcile, and (when keys not owned are skipped) every key's recent
/// deletions, for the slots this replica gains later.
pub(crate) struct Deletions<O: Object> {
    pub(crate) last_states: Arc<LastStates<O>>,
    pub(crate) departed: Option<Arc<Departed<O>>>,
    /// Tracked reads: a deleted key's are forgotten.
    pub(crate) reads: Option<Tracker<O::Key>>,
}

/// The primary source: each object's own key, as the informer computed it
/// (`Object::key` is not called again). A deletion that passes the
/// predicate leaves the object's last state in `last_states` for the key's
/// reconcile; a creation forgets it. Sharded, every shard's deletions are
/// kept in `departed` too, for the shards this replica gains later.
pub(crate) fn subscribe_primary<O: Object>(
    watch: &Watch<O>,
    sink: Enqueue<O::Key>,
    deletions: Deletions<O>,
) -> Box<dyn Synced>
where
    O::Key: crate::QueueKey,
{
    let Deletions {
        last_states,
        departed,
        reads,
    } = deletions;
    let predicate = watch.predicate.clone();
    let on_event = move |key: Cow<'_, O::Key>, event: &Event<O>, keys: &mut Keys<O::Key>| {
        // Whatever the predicate says: a deleted key's reads wake nothing.
        if let (Event::Deleted(_), Some(reads)) = (event, &reads) {
            reads.forget(&key);
        }
        if predicate.as_ref().is_some_and(|p| !p.matches(event)) {
            return;
        }
        if let (Event::Deleted(last), Some(departed)) = (event, &departed) {
            departed.deleted(O::Key::clone(&key), last);
        }
        // Another replica's key leaves no last state here.
        if !keys.wants(&key) {
            return;
        }
        let trigger = match event {
            Event::Initial(_) => Trigger::Initial,
            Event::Applied { .. } => Trigger::Changed,
            Event::Deleted(last) => {
                last_states.deleted(O::Key::clone(&key), last);
                Trigger::Deleted
            }
            Event::Resync(_) => Trigger::Resync,
        };
        if matches!(event, Event::Initial(_) | Event::Applied { .. }) {
            last_states.forget(&key);
        }
        // Owned when the informer handed its copy over (this is its last
        // handler); a borrowed key is copied unless a repeat.
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
    fn informer_id(&self) -> InformerId;
    fn optional(&self) -> bool;
    /// How far its cache is behind its source.
    fn lag(&self) -> Option<CacheLag>;
    /// Its record of reads, when its reads are tracked (`reads`).
    fn tracked(&self) -> Option<Arc<dyn Remember<K>>> {
        None
    }
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
        let on_event = move |_: Cow<'_, P::Key>, event: &Event<P>, sink: &mut Keys<K>| {
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
        let subscription = self
            .watch
            .informer
            .subscribe_handler(Gather::new(sink, on_event));
        synced(subscription, self.watch.optional)
    }

    fn add_cache(&self, caches: &mut Caches) {
        caches.push(self.watch.informer.cache(), self.watch.optional);
    }

    fn informer_id(&self) -> InformerId {
        self.watch.informer.id()
    }

    fn optional(&self) -> bool {
        self.watch.optional
    }

    fn lag(&self) -> Option<CacheLag> {
        self.watch.informer.lag()
    }
}

impl<P: Object> Watch<P> {
    pub(crate) fn informer(&self) -> &Informer<P> {
        &self.informer
    }

    /// Whether `event` passes the predicate (if any).
    pub(super) fn passes(&self, event: &Event<P>) -> bool {
        self.predicate.as_ref().is_none_or(|p| p.matches(event))
    }

    pub(super) fn is_optional(&self) -> bool {
        self.optional
    }
}

/// `subscription`, waited for unless `optional`.
pub(super) fn synced<P: Object>(subscription: Subscription<P>, optional: bool) -> Box<dyn Synced> {
    if optional {
        Box::new(Optional(subscription))
    } else {
        Box::new(subscription)
    }
}

/// Initial lists and resyncs re-check what may not have changed: background work.
pub(super) fn is_background<P>(event: &Event<P>) -> bool {
    matches!(event, Event::Initial(_) | Event::Resync(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Revision;
    use crate::informer::Event;
    use crate::queue::{Priority, WorkQueue};

    #[derive(Clone, Debug)]
    struct Item {
        name: String,
        version: Revision,
    }
    crate::impl_object!(Item, key: name: String, version: version);

    type Pushes = fn(Cow<'_, String>, &Event<Item>, &mut Keys<String>);

    fn gather(queue: &WorkQueue<String, super::super::Triggers>) -> Gather<String, Pushes> {
        let sink = Enqueue {
            queue: queue.clone(),
            background: Priority::LOW,
            ownership: None,
        };
        Gather::new(sink, |_, _, _| {})
    }

    #[test]
    fn a_settled_flush_keeps_the_tail_and_the_buffer() {
        let queue = WorkQueue::builder().payload().build();
        let mut gather = gather(&queue);
        for n in 0..100 {
            let key = if n % 2 == 0 {
                "tail".into()
            } else {
                n.to_string()
            };
            gather.keys.push(key, Trigger::Changed, false);
        }
        gather.keys.push("tail".into(), Trigger::Changed, false);
        let capacity = gather.keys.pending.capacity();
        Handler::<Item>::flush_settled(&mut gather);
        let kept: Vec<_> = gather
            .keys
            .pending
            .iter()
            .map(|(key, ..)| key.as_str())
            .collect();
        assert_eq!(kept, ["tail"; 51], "the tail's entries stay");
        assert_eq!(queue.len(), 50, "the rest reached the queue");
        assert_eq!(gather.keys.pending.capacity(), capacity, "the buffer stays");
    }

    #[test]
    fn a_burst_of_one_keys_events_is_gathered_once() {
        let queue = WorkQueue::builder().payload().build();
        let mut gather = gather(&queue);
        let keys = &mut gather.keys;
        for _ in 0..100 {
            keys.push("a".into(), Trigger::Changed, false);
        }
        keys.push("a".into(), Trigger::Deleted, false);
        keys.push("a".into(), Trigger::Deleted, true);
        keys.push("b".into(), Trigger::Changed, false);
        keys.push("a".into(), Trigger::Changed, false);
        let gathered: Vec<_> = keys
            .pending
            .iter()
            .map(|(key, t, b)| (key.as_str(), *t, *b))
            .collect();
        assert_eq!(
            gathered,
            [
                ("a", Trigger::Changed, false),
                ("a", Trigger::Deleted, false),
                ("a", Trigger::Deleted, true),
                ("b", Trigger::Changed, false),
                ("a", Trigger::Changed, false),
            ],
            "only the same ask back to back is dropped"
        );
    }

    #[test]
    fn a_flush_does_not_keep_a_whole_lists_buffer() {
        let queue = WorkQueue::builder().payload().build();
        let mut gather = gather(&queue);
        for n in 0..10 * KEPT_CAPACITY {
            gather.keys.push(n.to_string(), Trigger::Initial, true);
        }
        gather.flush_keys();
        assert_eq!(queue.len(), 10 * KEPT_CAPACITY);
        assert!(gather.keys.pending.capacity() <= KEPT_CAPACITY);
    }
}
