//! The last cached state of deleted primary objects, kept until their key's
//! next successful reconcile: what cleanup of external things they named
//! needs, since the cache no longer has them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::object::Object;

/// See the module docs. Memory is bounded by the keys awaiting cleanup; a
/// count read without the lock keeps the common case (no deleted object
/// awaiting its reconcile) to one atomic load per event and reconcile.
pub(super) struct LastStates<O: Object> {
    count: AtomicUsize,
    states: Mutex<HashMap<O::Key, Arc<O>>>,
}

impl<O: Object> LastStates<O> {
    /// Deleted objects' states kept.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub(super) fn new() -> Self {
        Self {
            count: AtomicUsize::new(0),
            states: Mutex::new(HashMap::new()),
        }
    }

    /// `key`'s object was deleted; `last` is its last cached state.
    pub(super) fn deleted(&self, key: O::Key, last: &Arc<O>) {
        let mut states = self.states.lock();
        states.insert(key, Arc::clone(last));
        self.count.store(states.len(), Ordering::Release);
    }

    /// `key`'s object exists (again): its old state is no longer wanted.
    pub(super) fn forget(&self, key: &O::Key) {
        if cfg!(tend_without = "last_states") || self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut states = self.states.lock();
        states.remove(key);
        self.count.store(states.len(), Ordering::Release);
    }

    /// A reconcile handed `last` succeeded: forgotten, unless the key was
    /// deleted again since (a newer last state).
    pub(super) fn handed(&self, key: &O::Key, last: &Arc<O>) {
        let mut states = self.states.lock();
        if states.get(key).is_some_and(|kept| Arc::ptr_eq(kept, last)) {
            states.remove(key);
            self.count.store(states.len(), Ordering::Release);
        }
    }

    /// The last state of `key`'s deleted object, if it awaits a reconcile.
    pub(super) fn get(&self, key: &O::Key) -> Option<Arc<O>> {
        if cfg!(tend_without = "last_states") || self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.states.lock().get(key).cloned()
    }
}
