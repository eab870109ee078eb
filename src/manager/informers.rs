//! The manager's informers, shared by name: who uses each, and which run.
//!
//! An informer registered before the manager runs is pinned: it runs for
//! the manager's whole life (a task may read its store). One registered
//! through a [`ManagerHandle`](super::ManagerHandle) runs while some
//! controller uses it, and is stopped and forgotten when the last one is
//! removed. The lock is held for a look or a change, never across an
//! `.await`.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::erased::SharedInformer;
use crate::informer::{Informer, InformerId};
use crate::object::Object;

/// One registered informer.
struct Entry {
    name: String,
    shared: Arc<dyn SharedInformer>,
    pinned: bool,
    /// Controllers using it now.
    users: usize,
    /// Its own stop, while it runs (pinned ones stop with the layer).
    running: Option<CancellationToken>,
}

/// An informer to start, or one that was stopped.
pub(super) struct Named {
    pub(super) name: String,
    pub(super) shared: Arc<dyn SharedInformer>,
}

/// See the module docs.
#[derive(Default)]
pub(super) struct Informers {
    entries: Mutex<Vec<Entry>>,
}

impl Informers {
    /// The informer registered as `name`, if any (`Err` when registered
    /// with another object type).
    pub(super) fn find<O: Object>(&self, name: &str) -> Option<Result<Informer<O>, ManagerError>> {
        let entries = self.entries.lock();
        let entry = entries.iter().find(|entry| entry.name == name)?;
        Some(
            entry
                .shared
                .as_any()
                .downcast_ref::<Informer<O>>()
                .cloned()
                .ok_or_else(|| ManagerError::InformerType {
                    informer: name.to_owned(),
                }),
        )
    }

    /// Registers `informer` as `name` unless a registration of that name
    /// came first (two handles racing); `pinned` ones run as long as the
    /// manager does. Returns the informer registered under `name`, and
    /// whether it is `shared`.
    pub(super) fn register(
        &self,
        name: &str,
        shared: Arc<dyn SharedInformer>,
        pinned: bool,
    ) -> (Arc<dyn SharedInformer>, bool) {
        let mut entries = self.entries.lock();
        if let Some(first) = entries.iter().find(|entry| entry.name == name) {
            return (Arc::clone(&first.shared), false);
        }
        entries.push(Entry {
            name: name.to_owned(),
            shared: Arc::clone(&shared),
            pinned,
            users: 0,
            running: None,
        });
        (shared, true)
    }

    /// Every registered informer, by name.
    pub(super) fn all(&self) -> Vec<(String, Arc<dyn SharedInformer>)> {
        self.entries
            .lock()
            .iter()
            .map(|entry| (entry.name.clone(), Arc::clone(&entry.shared)))
            .collect()
    }

    /// The informers whose sync someone waits for: pinned or in use, and
    /// not read only as `optional` sources.
    pub(super) fn awaited(
        &self,
        optional: &[InformerId],
    ) -> Vec<(String, Arc<dyn SharedInformer>)> {
        self.entries
            .lock()
            .iter()
            .filter(|e| (e.pinned || e.users > 0) && !optional.contains(&e.shared.id()))
            .map(|entry| (entry.name.clone(), Arc::clone(&entry.shared)))
            .collect()
    }

    /// Whether every one of `ids` is registered.
    pub(super) fn knows(&self, ids: &[InformerId]) -> bool {
        let entries = self.entries.lock();
        ids.iter()
            .all(|id| entries.iter().any(|e| e.shared.id() == *id))
    }

    /// The pinned informers, marked running under `stop`: the ones the
    /// manager starts when it runs.
    pub(super) fn start_pinned(&self, stop: &CancellationToken) -> Vec<(Named, CancellationToken)> {
        let mut entries = self.entries.lock();
        entries
            .iter_mut()
            .filter(|entry| entry.pinned && entry.running.is_none())
            .map(|entry| start(entry, stop))
            .collect()
    }

    /// A controller reading `ids` starts: counts it, and returns the
    /// informers to start (registered, not running yet), each with its stop.
    pub(super) fn acquire(
        &self,
        ids: &[InformerId],
        stop: &CancellationToken,
    ) -> Vec<(Named, CancellationToken)> {
        let mut entries = self.entries.lock();
        let mut starting = Vec::new();
        for entry in entries.iter_mut().filter(|e| ids.contains(&e.shared.id())) {
            entry.users += 1;
            if entry.running.is_none() {
                starting.push(start(entry, stop));
            }
        }
        starting
    }

    /// A controller reading `ids` is gone: the informers no one uses any
    /// more (and not pinned) are stopped and forgotten; returns them.
    pub(super) fn release(&self, ids: &[InformerId]) -> Vec<Named> {
        let mut entries = self.entries.lock();
        for entry in entries.iter_mut().filter(|e| ids.contains(&e.shared.id())) {
            entry.users = entry.users.saturating_sub(1);
        }
        let mut stopped = Vec::new();
        entries.retain(|entry| {
            let unused = !entry.pinned && entry.users == 0 && entry.running.is_some();
            if unused {
                if let Some(running) = &entry.running {
                    running.cancel();
                }
                stopped.push(Named {
                    name: entry.name.clone(),
                    shared: Arc::clone(&entry.shared),
                });
            }
            !unused
        });
        stopped
    }
}

/// Marks `entry` running under a child of `stop`.
fn start(entry: &mut Entry, stop: &CancellationToken) -> (Named, CancellationToken) {
    let token = stop.child_token();
    entry.running = Some(token.clone());
    let named = Named {
        name: entry.name.clone(),
        shared: Arc::clone(&entry.shared),
    };
    (named, token)
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock();
        let names: Vec<_> = entries.iter().map(|e| (&e.name, e.users)).collect();
        f.debug_struct("Informers").field("users", &names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::object::Revision;

    #[derive(Debug, Clone)]
    struct Item {
        name: String,
        version: Revision,
    }

    crate::impl_object!(Item, key: name: String, version: version);

    fn shared(name: &str) -> Arc<dyn SharedInformer> {
        let store = MemoryStore::<Item>::new(name);
        Arc::new(Informer::builder(store).build().expect("valid"))
    }

    #[test]
    fn the_first_registration_of_a_name_wins_and_unused_ones_are_not_awaited() {
        let informers = Informers::default();
        let first = shared("a");
        let (kept, ours) = informers.register("items", Arc::clone(&first), false);
        assert!(ours);
        assert_eq!(kept.id(), first.id());
        let (kept, ours) = informers.register("items", shared("b"), false);
        assert!(!ours, "a second registration of the name shares the first");
        assert_eq!(kept.id(), first.id());
        assert_eq!(informers.all().len(), 1);
        assert!(informers.awaited(&[]).is_empty(), "unpinned and unused");
        let stop = CancellationToken::new();
        let started = informers.acquire(&[first.id()], &stop);
        assert_eq!(started.len(), 1, "started by its first user");
        assert_eq!(informers.awaited(&[]).len(), 1);
        assert!(
            informers.awaited(&[first.id()]).is_empty(),
            "read only optionally"
        );
        let stopped = informers.release(&[first.id()]);
        assert_eq!(stopped.len(), 1, "stopped by its last user");
        assert!(started[0].1.is_cancelled());
        assert!(informers.all().is_empty(), "and forgotten");
    }
}
