//! What a reconcile is given: the key, the current object, and more.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Triggers;
use crate::informer::Store;
use crate::source::Object;

/// Everything a reconcile of one key gets.
pub struct Context<O: Object> {
    pub(super) key: O::Key,
    pub(super) object: Option<Arc<O>>,
    pub(super) attempt: u32,
    pub(super) triggers: Triggers,
    /// The worker's token, shared: cloning a token takes its tree's lock.
    pub(super) cancel: Arc<CancellationToken>,
    pub(super) caches: Arc<Caches>,
    pub(super) fencing_token: Option<u64>,
}

impl<O: Object> Context<O> {
    /// The key being reconciled.
    pub fn key(&self) -> &O::Key {
        &self.key
    }

    /// The primary object as cached right before this reconcile, or `None`
    /// if it does not exist (deleted, or never created): absence is a state
    /// to reconcile too.
    pub fn object(&self) -> Option<&Arc<O>> {
        self.object.as_ref()
    }

    /// 1 for a first attempt, n + 1 after n failures (reset by success).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why this reconcile ran.
    pub fn triggers(&self) -> Triggers {
        self.triggers
    }

    /// A token cancelled when this reconcile must stop: its timeout passed,
    /// the controller is shutting down past its grace period, or leadership
    /// was lost. It is cancelled right before the reconcile's future is
    /// dropped, so work the reconcile spawned (tasks, requests running on
    /// their own) can watch it and stop too. Each call gives a child token:
    /// cancelling it yourself affects nothing else.
    pub fn cancelled(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// A read handle to the cache of objects of type `P` that this
    /// controller watches (primary or secondary), or `None` if it watches
    /// none. With several sources of one type, the first registered.
    pub fn store<P: Object>(&self) -> Option<Store<P>> {
        self.caches.get::<P>()
    }

    /// The leader's fencing token when running under leader election: an
    /// opaque value that grows with every change of leader. Pass it to
    /// writes that check it, so a deposed leader's late write is refused.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}

impl<O: Object> fmt::Debug for Context<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("key", &self.key)
            .field("exists", &self.object.is_some())
            .field("attempt", &self.attempt)
            .field("triggers", &self.triggers)
            .finish_non_exhaustive()
    }
}

/// Read handles to every cache a controller watches, found by type.
///
/// Cloned once per worker: contexts share their worker's copy, so handing
/// one to a reconcile does not bounce a reference count between cores.
#[derive(Default, Clone)]
pub(crate) struct Caches(Vec<Arc<dyn Any + Send + Sync>>);

impl Caches {
    pub(crate) fn push<P: Object>(&mut self, store: Store<P>) {
        self.0.push(Arc::new(store));
    }

    fn get<P: Object>(&self) -> Option<Store<P>> {
        self.0
            .iter()
            .find_map(|s| s.downcast_ref::<Store<P>>())
            .cloned()
    }
}
