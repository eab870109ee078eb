//! What a reconcile is given: the key, the current object, and more.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

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
    /// This reconcile's token, made on first use.
    pub(super) cancel: Arc<ReconcileToken>,
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

    /// 1 for a first attempt, n + 1 after n failures or
    /// [`Action::Requeue`](super::Action::Requeue)s in a row (the rate
    /// limiter's count; reset by `Done`, `RequeueAfter` or a terminal error).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why this reconcile ran.
    pub fn triggers(&self) -> Triggers {
        self.triggers
    }

    /// A token cancelled when this reconcile must stop, so that work it
    /// spawned (tasks, requests running on their own) can watch it and stop
    /// too. It belongs to this reconcile alone, and is cancelled exactly when:
    ///
    /// - this reconcile's timeout passes (right before its future is dropped);
    /// - leadership is lost;
    /// - the controller stops: its shutdown grace period is over, or its
    ///   [`run`](super::Controller::run) returns (or is dropped).
    ///
    /// The last two hold after the reconcile has returned too: work it
    /// spawned stops when the controller stops acting. Nothing else cancels
    /// it: never another key's timeout, never the reconcile's own return.
    /// Each call gives a child token: cancelling it yourself affects nothing
    /// else.
    ///
    /// # Examples
    ///
    /// ```
    /// # use tend::controller::Context;
    /// # #[derive(Clone)] struct Job { name: String, v: tend::Revision }
    /// # tend::impl_object!(Job, key: name: String, version: v);
    /// fn start_upload(ctx: &Context<Job>) {
    ///     let stop = ctx.cancelled();
    ///     tokio::spawn(async move {
    ///         tokio::select! {
    ///             () = stop.cancelled() => { /* controller stopped: give up */ }
    ///             () = async { /* the long upload */ } => {}
    ///         }
    ///     });
    /// }
    /// ```
    pub fn cancelled(&self) -> CancellationToken {
        self.cancel.get().child_token()
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

/// The cancellation token of one reconcile: a child of its worker's token
/// (cancelled at the controller's hard stop and on lost leadership), made
/// only when the reconcile asks for it, since making one takes a lock on
/// the worker's token.
pub(super) struct ReconcileToken {
    worker: Arc<CancellationToken>,
    own: OnceLock<CancellationToken>,
}

impl ReconcileToken {
    pub(super) fn new(worker: Arc<CancellationToken>) -> Self {
        Self {
            worker,
            own: OnceLock::new(),
        }
    }

    fn get(&self) -> &CancellationToken {
        self.own.get_or_init(|| self.worker.child_token())
    }

    /// Cancels this reconcile's token (its timeout passed). Made first if
    /// need be, so a context that outlives its reconcile (moved into a task)
    /// hands out cancelled tokens from then on.
    pub(super) fn cancel(&self) {
        self.get().cancel();
    }

    /// Readies this token for the worker's next reconcile, if no context of
    /// the last one is left: saves an allocation per reconcile. Otherwise
    /// `slot` gets a new token.
    pub(super) fn recycle(slot: &mut Arc<Self>) {
        match Arc::get_mut(slot) {
            Some(token) => drop(token.own.take()),
            None => *slot = Arc::new(Self::new(Arc::clone(&slot.worker))),
        }
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
