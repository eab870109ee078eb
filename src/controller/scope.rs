//! What belongs to one reconcile beyond its context: its cancellation token
//! and the writes it made through its clients.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::ControllerObserver;
use crate::client::{Head, WriteHook};
use crate::object::Revision;

/// A reconcile's writes, for read-your-writes: per cache, the highest
/// revision written; and per cache written with an unknown outcome, its
/// backend's head (one is enough).
#[derive(Default)]
pub(super) struct Writes {
    pub(super) landed: Vec<(usize, Revision)>,
    pub(super) unsure: Vec<(usize, Arc<dyn Head>)>,
}

/// One reconcile's scope. Its token is a child of its worker's token
/// (cancelled at the controller's hard stop and on lost leadership), made
/// only when the reconcile asks for it, since making one takes a lock on the
/// worker's token. Its writes are the highest revision written per cache of
/// the controller, for read-your-writes; its fenced writes refused go to the
/// controller's observer as they happen (so a refusal in a task the
/// reconcile spawned counts, even after it returned).
pub(super) struct Scope {
    worker: Arc<CancellationToken>,
    own: OnceLock<CancellationToken>,
    writes: Mutex<Writes>,
    /// Whether any write through its clients landed (for hot keys; with or
    /// without read-your-writes, to any type).
    wrote: AtomicBool,
    observer: Arc<dyn ControllerObserver>,
}

impl Scope {
    pub(super) fn new(
        worker: Arc<CancellationToken>,
        observer: Arc<dyn ControllerObserver>,
    ) -> Self {
        Self {
            worker,
            own: OnceLock::new(),
            writes: Mutex::new(Writes::default()),
            wrote: AtomicBool::new(false),
            observer,
        }
    }

    pub(super) fn token(&self) -> &CancellationToken {
        self.own.get_or_init(|| self.worker.child_token())
    }

    /// Cancels this reconcile's token (its timeout passed). Made first if
    /// need be, so a context that outlives its reconcile (moved into a task)
    /// hands out cancelled tokens from then on.
    pub(super) fn cancel(&self) {
        self.token().cancel();
    }

    /// The reconcile wrote `revision` to the objects of cache `cache`.
    fn record(&self, cache: usize, revision: Revision) {
        self.wrote.store(true, Ordering::Relaxed);
        let landed = &mut self.writes.lock().landed;
        match landed.iter_mut().find(|(at, _)| *at == cache) {
            Some((_, highest)) => *highest = (*highest).max(revision),
            None => landed.push((cache, revision)),
        }
    }

    /// A write to the objects of cache `cache` may have landed; `head`
    /// reads their backend's newest revision.
    fn record_unsure(&self, cache: usize, head: Arc<dyn Head>) {
        let unsure = &mut self.writes.lock().unsure;
        if unsure.iter().all(|(at, _)| *at != cache) {
            unsure.push((cache, head));
        }
    }

    /// Whether a write landed since the last call.
    pub(super) fn take_wrote(&self) -> bool {
        self.wrote.swap(false, Ordering::Relaxed)
    }

    /// The writes recorded so far, emptying the record.
    pub(super) fn take_writes(&self) -> Writes {
        std::mem::take(&mut *self.writes.lock())
    }

    /// Readies this scope for the worker's next reconcile, if no context of
    /// the last one is left: saves an allocation per reconcile. Otherwise
    /// `slot` gets a new scope.
    pub(super) fn recycle(slot: &mut Arc<Self>) {
        match Arc::get_mut(slot) {
            Some(scope) => {
                drop(scope.own.take());
                let writes = scope.writes.get_mut();
                writes.landed.clear();
                writes.unsure.clear();
                *scope.wrote.get_mut() = false;
            }
            None => {
                let (worker, observer) = (Arc::clone(&slot.worker), Arc::clone(&slot.observer));
                *slot = Arc::new(Self::new(worker, observer));
            }
        }
    }
}

/// A reconcile's client with nothing to wait for (read-your-writes off, or
/// no cache of its type) tells its scope only that it wrote, and of
/// refusals.
impl WriteHook for Scope {
    fn wrote(&self, _revision: Revision) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    fn refused(&self) {
        self.observer.fenced_write_refused();
    }
}

/// Records a reconcile's writes through one of its clients, to the objects
/// of its controller's cache `cache`.
pub(super) struct Record {
    scope: Arc<Scope>,
    cache: usize,
}

impl Record {
    pub(super) fn new(scope: &Arc<Scope>, cache: usize) -> Self {
        Self {
            scope: Arc::clone(scope),
            cache,
        }
    }
}

impl WriteHook for Record {
    fn wrote(&self, revision: Revision) {
        self.scope.record(self.cache, revision);
    }

    fn unsure(&self, head: Arc<dyn Head>) {
        self.scope.record_unsure(self.cache, head);
    }

    fn refused(&self) {
        self.scope.refused();
    }
}
