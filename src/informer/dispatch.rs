//! Subscribers: the handlers an informer calls with every event.
//!
//! Handlers are called synchronously by whoever holds the subscriber lock:
//! the informer for live events, [`Informer::subscribe`](super::Informer::subscribe)
//! for a late subscriber's replay. Holding the lock across "change the cache,
//! then deliver the event" is what makes a late subscriber's replay exact: it
//! sees the cache between two changes, and from then on exactly the events
//! after it.
//!
//! # Lock order
//!
//! The subscriber lock, then the store's cache lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::store::Store;
use super::{Event, InformerError};
use crate::source::Object;

/// A subscriber's handler, boxed.
type Handler<O> = Box<dyn FnMut(&Event<O>) + Send>;

/// The handlers of one informer.
pub(crate) struct Subscribers<O: Object> {
    list: Mutex<HandlerList<O>>,
}

pub(crate) struct HandlerList<O: Object> {
    next_id: u64,
    handlers: Vec<(u64, Handler<O>)>,
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
    pub(crate) fn add(&self, store: &Store<O>, mut handler: Handler<O>) -> u64 {
        let mut list = self.list.lock();
        if store.is_synced() {
            for object in store.snapshot() {
                handler(&Event::Initial(object));
            }
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

    /// Calls every handler with `event`.
    pub(crate) fn deliver(&mut self, event: &Event<O>) {
        for (_, handler) in &mut self.handlers {
            handler(event);
        }
    }
}

/// A registered handler; dropping it unsubscribes.
///
/// Returned by [`Informer::subscribe`](super::Informer::subscribe).
#[must_use = "dropping a Subscription unsubscribes its handler"]
pub struct Subscription<O: Object> {
    id: u64,
    subscribers: Arc<Subscribers<O>>,
    store: Store<O>,
}

impl<O: Object> Subscription<O> {
    pub(crate) fn new(id: u64, subscribers: Arc<Subscribers<O>>, store: Store<O>) -> Self {
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
