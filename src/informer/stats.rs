//! The informer's counters, and when it last made progress.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::CacheLag;
use crate::object::Revision;

/// A snapshot of an informer's counters, from
/// [`Informer::stats`](super::Informer::stats).
///
/// Counters only grow (except `cache_size` and `revision`); they are
/// cumulative over every [`run`](super::Informer::run).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// store.fail_next_lists(1); // the first list fails; the informer backs off, lists again
/// let informer = Informer::builder(store).build()?;
/// let stop = CancellationToken::new();
/// let run = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// informer.wait_synced(Duration::from_secs(60)).await?;
/// let stats = informer.stats();
/// assert_eq!((stats.lists, stats.relists, stats.cache_size), (2, 0, 1));
/// assert_eq!(stats.revision, Revision::new(1)); // where its watch started
/// assert!(stats.last_progress.is_some() && stats.failing_since.is_none());
/// stop.cancel();
/// run.await??;
/// # Ok(()) }
/// ```
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
    /// Listed or watched objects left out of the cache because its
    /// [`CacheScope`](super::CacheScope) does not keep their keys: what a
    /// source that cannot filter by the scope sends for nothing (a
    /// `KubeSource` selecting by shard label sends none).
    pub out_of_scope: u64,
    /// Objects in the cache now.
    pub cache_size: usize,
    /// The latest revision the informer has seen (from lists, changes and
    /// bookmarks): where the next watch starts.
    pub revision: Revision,
    /// When the informer last made progress: a successful list, or a change
    /// or bookmark from its watch (stale changes count: the source
    /// answered). `None` before the first.
    pub last_progress: Option<Instant>,
    /// When the source's current run of failures began: the first failed
    /// list, watch or open watch after a success. `None` while the last
    /// call succeeded (a list, an opened watch, a change or bookmark).
    pub failing_since: Option<Instant>,
    /// How far the cache is behind the source (see [`CacheLag`]); `None`
    /// until the source's head was probed.
    pub lag: Option<CacheLag>,
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
    pub(crate) out_of_scope: AtomicU64,
    pub(crate) revision: AtomicU64,
    progress: Mutex<Progress>,
}

/// [`InformerStats::last_progress`] and [`InformerStats::failing_since`]:
/// updated once per list, watch call or batch of changes, not per change.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    last: Option<Instant>,
    failing_since: Option<Instant>,
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

    /// The source delivered: a list, or changes or bookmarks from a watch.
    pub(crate) fn progressed(&self, now: Instant) {
        *self.progress.lock() = Progress {
            last: Some(now),
            failing_since: None,
        };
    }

    /// A call to the source succeeded without delivering (a watch opened).
    pub(crate) fn succeeded(&self) {
        self.progress.lock().failing_since = None;
    }

    /// A call to the source failed.
    pub(crate) fn failed(&self, now: Instant) {
        self.progress.lock().failing_since.get_or_insert(now);
    }

    /// The newest revision seen (where the next watch starts).
    pub(crate) fn revision(&self) -> Revision {
        Revision::new(self.revision.load(Ordering::Relaxed))
    }

    pub(crate) fn snapshot(&self, cache_size: usize) -> InformerStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let progress = *self.progress.lock();
        InformerStats {
            lists: load(&self.lists),
            relists: load(&self.relists),
            watch_restarts: load(&self.watch_restarts),
            events_applied: load(&self.events_applied),
            stale_ignored: load(&self.stale_ignored),
            resyncs: load(&self.resyncs),
            out_of_scope: load(&self.out_of_scope),
            cache_size,
            revision: Revision::new(load(&self.revision)),
            last_progress: progress.last,
            failing_since: progress.failing_since,
            lag: None,
        }
    }
}
