//! Subscribers: the handlers an informer calls with every event.
//!
//! Handlers are called synchronously by whoever holds the subscriber lock:
//! the informer for live events, [`Informer::subscribe`](super::Informer::subscribe)
//! for a late subscriber's replay. Holding the lock across "change the cache,
//! then deliver the event" is what makes a late subscriber's replay exact: it
//! sees the cache between two changes, and from then on exactly the events
//! after it.
//!
//! A handler may buffer what events ask of it (the controller gathers keys
//! and adds them to its queue under one lock): after a run of events, the
//! informer calls [`Handler::flush`], before it waits for anything and at
//! least every [`FLUSH_EVERY`] events, so buffering adds no latency. While a
//! watch's input goes on, the flush is [`Handler::flush_settled`]: the key
//! of the last event may be kept back once, so that a burst of changes to
//! one key reaches the queue in one piece.
//!
//! Each event comes with its object's key, computed once by the informer
//! when it applied the change (or taken from the cache, or from a
//! deletion): `Object::key` is user code, so no handler calls it again.
//!
//! # Lock order
//!
//! The subscriber lock, then the store's cache lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::cache::Cache;
use super::{Event, InformerError};
use crate::object::Object;

/// Events delivered between two flushes, at most: bounds how long a long
/// list or replay holds back what a buffering handler gathered.
pub(crate) const FLUSH_EVERY: usize = 256;

/// An event with its object's key.
pub(crate) type Keyed<O> = (<O as Object>::Key, Event<O>);

/// What a subscriber does with events.
pub(crate) trait Handler<O: Object>: Send {
    /// One event, in order, with its object's key.
    fn event(&mut self, key: &O::Key, event: &Event<O>);

    /// [`event`](Self::event), with the key to keep: the last handler of
    /// an informer gets it so, which spares it a clone. Default: `event`.
    fn event_owned(&mut self, key: O::Key, event: &Event<O>) {
        self.event(&key, event);
    }

    /// A run of events ended: act on anything buffered.
    fn flush(&mut self) {}

    /// A run of events ended but input goes on: act on what is buffered,
    /// except that a handler may keep back what the last event asked for
    /// (likely in the middle of a burst of changes to one key) until the
    /// next flush; never twice in a row. Default: [`flush`](Self::flush).
    fn flush_settled(&mut self) {
        self.flush();
    }
}

/// A plain closure, called with each event (what
/// [`Informer::subscribe`](super::Informer::subscribe) takes).
pub(crate) struct EachEvent<F>(pub(crate) F);

impl<O: Object, F: FnMut(&Event<O>) + Send> Handler<O> for EachEvent<F> {
    fn event(&mut self, _key: &O::Key, event: &Event<O>) {
        (self.0)(event);
    }
}

/// The handlers of one informer.
pub(crate) struct Subscribers<O: Object> {
    list: Mutex<HandlerList<O>>,
}

pub(crate) struct HandlerList<O: Object> {
    next_id: u64,
    handlers: Vec<(u64, Box<dyn Handler<O>>)>,
}

impl<O: Object> Subscribers<O> {
    pub(crate) fn new() -> Self {
        Self {
            list: Mutex::new(HandlerList {
                next_id: 0,
                handlers: Vec::new(),
            }),
        }
    }

    /// Takes the subscriber lock: while held, no event is delivered and no
    /// subscriber joins or leaves.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HandlerList<O>> {
        self.list.lock()
    }

    /// Registers `handler`, first replaying `store` to it as
    /// [`Event::Initial`] when the store is synced.
    pub(crate) fn add(&self, store: &Cache<O>, mut handler: Box<dyn Handler<O>>) -> u64 {
        let mut list = self.list.lock();
        if store.is_synced() {
            for (n, (key, object)) in store.snapshot().into_iter().enumerate() {
                handler.event_owned(key, &Event::Initial(object));
                if (n + 1) % FLUSH_EVERY == 0 {
                    handler.flush();
                }
            }
            handler.flush();
        }
        let id = list.next_id;
        list.next_id += 1;
        list.handlers.push((id, handler));
        id
    }

    fn remove(&self, id: u64) {
        let removed = {
            let mut list = self.list.lock();
            list.handlers
                .iter()
                .position(|(handler_id, _)| *handler_id == id)
                .map(|position| list.handlers.swap_remove(position))
        };
        // The handler (and whatever it captured) is dropped outside the lock.
        drop(removed);
    }
}

impl<O: Object> HandlerList<O> {
    /// Whether anyone listens.
    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Calls every handler with `event`, about the object under `key`.
    pub(crate) fn deliver(&mut self, key: &O::Key, event: &Event<O>) {
        for (_, handler) in &mut self.handlers {
            handler.event(key, event);
        }
    }

    /// [`deliver`](Self::deliver), handing `key` itself to the last
    /// handler (the others get it borrowed).
    pub(crate) fn deliver_owned(&mut self, key: O::Key, event: &Event<O>) {
        if let Some(((_, last), others)) = self.handlers.split_last_mut() {
            for (_, handler) in others {
                handler.event(&key, event);
            }
            last.event_owned(key, event);
        }
    }

    /// Tells every handler a run of events ended.
    pub(crate) fn flush(&mut self) {
        for (_, handler) in &mut self.handlers {
            handler.flush();
        }
    }

    /// Tells every handler a run of events ended while input goes on.
    pub(crate) fn flush_settled(&mut self) {
        for (_, handler) in &mut self.handlers {
            handler.flush_settled();
        }
    }

    /// Delivers `events`, flushing every [`FLUSH_EVERY`] and at the end
    /// (even when a handler panics: what the others gathered is not lost).
    /// Keys go to the handlers by value (see
    /// [`deliver_owned`](Self::deliver_owned)); the events are returned, so
    /// that the objects whose last reference they hold are freed outside
    /// the lock.
    pub(crate) fn deliver_all(&mut self, events: Vec<Keyed<O>>) -> Vec<Event<O>> {
        let mut spent = Vec::with_capacity(events.len());
        let list = FlushOnDrop(self);
        for (n, (key, event)) in events.into_iter().enumerate() {
            list.0.deliver_owned(key, &event);
            spent.push(event);
            if (n + 1) % FLUSH_EVERY == 0 {
                list.0.flush();
            }
        }
        spent
    }
}

/// Flushes the handlers when dropped, also while unwinding.
struct FlushOnDrop<'a, O: Object>(&'a mut HandlerList<O>);

impl<O: Object> Drop for FlushOnDrop<'_, O> {
    fn drop(&mut self) {
        self.0.flush();
    }
}

/// Flushes the handlers if dropped while unwinding: a run of events
/// delivered one lock at a time (the watch) hands over what handlers
/// gathered even if a transform, an index or a handler panics part-way.
/// Never hold the subscriber lock where it is dropped.
pub(crate) struct FlushOnUnwind<'a, O: Object>(pub(crate) &'a Subscribers<O>);

impl<O: Object> Drop for FlushOnUnwind<'_, O> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().flush();
        }
    }
}

/// A registered handler; dropping it unsubscribes.
///
/// Returned by [`Informer::subscribe`](super::Informer::subscribe).
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Event, Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// let informer = Informer::builder(store.clone()).build()?;
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let subscription = informer.subscribe({
///     let seen = Arc::clone(&seen);
///     move |event: &Event<Light>| seen.lock().unwrap().push(event.object().room.clone())
/// });
/// let stop = CancellationToken::new();
/// # let run = tokio::spawn({
/// #     let (informer, stop) = (informer.clone(), stop.clone());
/// #     async move { informer.run(stop).await }
/// # });
/// // … run the informer …
/// subscription.wait_synced(Duration::from_secs(5)).await?; // the handler got the list
/// assert_eq!(*seen.lock().unwrap(), ["hall"]);
///
/// drop(subscription); // unsubscribes: later events reach no handler
/// store.put(Light { room: "attic".into(), version: Revision::ZERO });
/// # stop.cancel();
/// # run.await??;
/// assert_eq!(seen.lock().unwrap().len(), 1);
/// # Ok(()) }
/// ```
#[must_use = "dropping a Subscription unsubscribes its handler"]
pub struct Subscription<O: Object> {
    id: u64,
    subscribers: Arc<Subscribers<O>>,
    store: Cache<O>,
}

impl<O: Object> Subscription<O> {
    pub(crate) fn new(id: u64, subscribers: Arc<Subscribers<O>>, store: Cache<O>) -> Self {
        Self {
            id,
            subscribers,
            store,
        }
    }

    /// Whether this handler has received every cached object: the replay of
    /// a late subscriber, or the first list for an early one.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.store.is_synced()
    }

    /// Waits until this handler has received every cached object (see
    /// [`is_synced`](Self::is_synced)).
    ///
    /// # Errors
    ///
    /// [`InformerError::SyncTimeout`], naming the source, when that did not
    /// happen within `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), InformerError> {
        // An early subscriber receives the first list before the store is
        // marked synced; a late one received its replay inside `subscribe`.
        self.store.wait_synced(timeout).await
    }
}

impl<O: Object> fmt::Debug for Subscription<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("source", &self.store.source_name())
            .field("synced", &self.is_synced())
            .finish()
    }
}

impl<O: Object> Drop for Subscription<O> {
    fn drop(&mut self) {
        self.subscribers.remove(self.id);
    }
}
