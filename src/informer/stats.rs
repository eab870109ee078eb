//! The informer's counters.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::source::Revision;

/// A snapshot of an informer's counters, from
/// [`Informer::stats`](super::Informer::stats).
///
/// Counters only grow (except `cache_size` and `revision`); they are
/// cumulative over every [`run`](super::Informer::run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStats {
    /// List calls made (including failed ones).
    pub lists: u64,
    /// Lists made after the first successful one (expired revision, repeated
    /// watch failures, relist timer, a new run).
    pub relists: u64,
    /// Watches opened to resume after a watch failed or ended (not counting
    /// the first watch after each list).
    pub watch_restarts: u64,
    /// Watch changes that changed the cache.
    pub events_applied: u64,
    /// Changes (or listed objects) ignored because the cache already held
    /// the same or a newer state: duplicates and reordered changes.
    pub stale_ignored: u64,
    /// Resync rounds delivered.
    pub resyncs: u64,
    /// Objects in the cache now.
    pub cache_size: usize,
    /// The latest revision the informer has seen (from lists, changes and
    /// bookmarks): where the next watch starts.
    pub revision: Revision,
}

/// The live counters, updated by the informer's task.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) lists: AtomicU64,
    pub(crate) relists: AtomicU64,
    pub(crate) watch_restarts: AtomicU64,
    pub(crate) events_applied: AtomicU64,
    pub(crate) stale_ignored: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) revision: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        if amount > 0 {
            counter.fetch_add(amount, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self, cache_size: usize) -> InformerStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        InformerStats {
            lists: load(&self.lists),
            relists: load(&self.relists),
            watch_restarts: load(&self.watch_restarts),
            events_applied: load(&self.events_applied),
            stale_ignored: load(&self.stale_ignored),
            resyncs: load(&self.resyncs),
            cache_size,
            revision: Revision::new(load(&self.revision)),
        }
    }
}
