//! `CacheScope`: which keys an informer's cache keeps when it should not
//! keep every key (a sharded replica's shards). The kept set changes while
//! the informer runs: when it grows, the informer lists again (the new
//! keys' objects were never cached) and reports the growth it filled; when
//! it shrinks, the informer drops what it no longer keeps, with no event
//! (nothing was deleted).

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::shard::{Shard, ShardCount};

/// Which keys an informer's cache keeps: only those `keeps` passes now,
/// a set that grows and shrinks at run time. Get one from
/// [`Sharding::cache_scope`](crate::placement::Sharding::cache_scope) and
/// build the informer with
/// [`InformerBuilder::scope`](super::InformerBuilder::scope).
///
/// A key outside the scope is not cached and its changes reach no
/// handler; [`Cache::get`](super::Cache::get), `list` and the indexes see
/// only the kept keys.
///
/// # Examples
///
/// A sharded replica whose cache keeps the objects of its own shards only:
///
/// ```
/// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
/// # tend::impl_object!(Item, key: name: String, version: version);
/// use tend::Informer;
/// use tend::memory::{MemoryMembershipGroup, MemoryStore};
/// use tend::placement::Sharding;
/// use tend::shard::ShardCount;
///
/// let shards = ShardCount::new(16)?;
/// let group = MemoryMembershipGroup::new("items", shards);
/// let sharding = Sharding::new(group.member("replica-1"), shards);
/// let items = MemoryStore::<Item>::new("items");
/// let informer = Informer::builder(items).scope(sharding.cache_scope()).build()?;
/// assert!(informer.cache().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CacheScope<K> {
    keeps: Arc<dyn Fn(&K) -> bool + Send + Sync>,
    /// The shards kept now, for a source that selects by shard.
    shards: Arc<dyn Fn() -> Vec<Shard> + Send + Sync>,
    count: ShardCount,
    changes: Arc<ScopeChanges>,
}

impl<K> Clone for CacheScope<K> {
    fn clone(&self) -> Self {
        Self {
            keeps: Arc::clone(&self.keeps),
            shards: Arc::clone(&self.shards),
            count: self.count,
            changes: Arc::clone(&self.changes),
        }
    }
}

impl<K> fmt::Debug for CacheScope<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheScope")
            .field("widened", &*self.changes.widened.borrow())
            .field("narrowed", &*self.changes.narrowed.borrow())
            .finish_non_exhaustive()
    }
}

impl<K> CacheScope<K> {
    /// The keys `keeps` passes, those of the shards (of `count`) that
    /// `shards` names; `changes` is told when that set changes.
    pub(crate) fn new(
        keeps: impl Fn(&K) -> bool + Send + Sync + 'static,
        shards: impl Fn() -> Vec<Shard> + Send + Sync + 'static,
        count: ShardCount,
        changes: Arc<ScopeChanges>,
    ) -> Self {
        Self {
            keeps: Arc::new(keeps),
            shards: Arc::new(shards),
            count,
            changes,
        }
    }

    /// How many shards keys map to.
    #[must_use]
    pub fn shard_count(&self) -> ShardCount {
        self.count
    }

    /// The shards kept now.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn kept_shards(&self) -> Vec<Shard> {
        (self.shards)()
    }

    /// Whether the cache keeps `key` now.
    pub(crate) fn keeps(&self, key: &K) -> bool {
        (self.keeps)(key)
    }

    /// An informer's end: the changes to follow, and where to say what it
    /// filled.
    pub(super) fn attach(&self) -> Attached {
        let filled = watch::Sender::new(0);
        let mut fills = self.changes.fills.lock();
        fills.retain(|fill| fill.has_changed().is_ok());
        fills.push(filled.subscribe());
        drop(fills);
        Attached {
            widened: self.changes.widened.subscribe(),
            narrowed: self.changes.narrowed.subscribe(),
            filled,
        }
    }
}

/// What the owner of a kept set tells its informers, and hears back.
pub(crate) struct ScopeChanges {
    /// How many times the set grew.
    widened: watch::Sender<u64>,
    /// How many times it shrank.
    narrowed: watch::Sender<u64>,
    /// Per informer built with the scope: the last growth its cache holds
    /// the objects of (a list applied since).
    fills: Mutex<Vec<watch::Receiver<u64>>>,
}

impl ScopeChanges {
    pub(crate) fn new() -> Self {
        Self {
            widened: watch::Sender::new(0),
            narrowed: watch::Sender::new(0),
            fills: Mutex::new(Vec::new()),
        }
    }

    /// The kept set grew (call after the change is visible to `keeps`):
    /// returns the growth the informers must fill.
    pub(crate) fn widen(&self) -> u64 {
        let mut generation = 0;
        self.widened.send_modify(|widened| {
            *widened += 1;
            generation = *widened;
        });
        generation
    }

    /// The kept set shrank: the informers drop what it no longer keeps.
    pub(crate) fn narrow(&self) {
        self.narrowed.send_modify(|narrowed| *narrowed += 1);
    }

    /// The last growth.
    pub(crate) fn generation(&self) -> u64 {
        *self.widened.borrow()
    }

    /// Whether an informer that still exists was built with the scope.
    pub(crate) fn attached(&self) -> bool {
        let mut fills = self.fills.lock();
        fills.retain(|fill| fill.has_changed().is_ok());
        !fills.is_empty()
    }

    /// Resolves once every informer built with the scope (and not dropped)
    /// has cached the objects of the growth `generation`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn filled(&self, generation: u64) {
        let fills = self.fills.lock().clone();
        for mut fill in fills {
            // An error: the informer is gone, nobody reads its cache.
            let _ = fill.wait_for(|&filled| filled >= generation).await;
        }
    }
}

/// One informer's end of its scope.
pub(super) struct Attached {
    pub(super) widened: watch::Receiver<u64>,
    pub(super) narrowed: watch::Receiver<u64>,
    /// The growth the cache holds the objects of.
    pub(super) filled: watch::Sender<u64>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::informer::{Event, Informer};
    use crate::object::Revision;
    use crate::source::{Snapshot, Source, SourceError, WatchStream};
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn filled_waits_for_every_informer_that_still_exists() {
        let changes = Arc::new(ScopeChanges::new());
        let count = ShardCount::new(1).expect("valid");
        let scope = CacheScope::<u64>::new(|_| true, Vec::new, count, Arc::clone(&changes));
        assert!(!changes.attached());
        let first = scope.attach();
        let second = scope.attach();
        assert!(changes.attached());
        let generation = changes.widen();
        assert_eq!(generation, 1);
        let filled = changes.filled(generation);
        tokio::pin!(filled);
        assert!(futures::poll!(filled.as_mut()).is_pending());
        first.filled.send_replace(generation);
        assert!(futures::poll!(filled.as_mut()).is_pending(), "one left");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(1), filled)
            .await
            .expect("a dropped informer is not waited for");
        drop(first);
        assert!(!changes.attached());
        changes.filled(changes.widen()).await;
    }

    #[derive(Debug, Clone)]
    struct Thing {
        name: String,
        version: Revision,
    }

    crate::impl_object!(Thing, key: name: String, version: version);

    type Kept = Arc<Mutex<HashSet<String>>>;

    /// Lists only the kept names, as a server selecting by label: each
    /// list after the first waits for a permit before it reads the kept
    /// set, and for another after.
    struct Selecting {
        store: MemoryStore<Thing>,
        kept: Kept,
        lists: AtomicUsize,
        before: Semaphore,
        after: Semaphore,
    }

    #[async_trait]
    impl Source for Selecting {
        type Object = Thing;

        fn name(&self) -> &str {
            "selecting"
        }

        async fn list(&self) -> Result<Snapshot<Thing>, SourceError> {
            let gated = self.lists.fetch_add(1, Ordering::AcqRel) > 0;
            if gated {
                self.before.acquire().await.expect("open").forget();
            }
            let kept = self.kept.lock().clone();
            if gated {
                self.after.acquire().await.expect("open").forget();
            }
            let mut snapshot = self.store.list().await?;
            snapshot.objects.retain(|thing| kept.contains(&thing.name));
            Ok(snapshot)
        }

        async fn watch(&self, from: Revision) -> Result<WatchStream<Thing>, SourceError> {
            self.store.watch(from).await
        }
    }

    fn thing(name: &str) -> Thing {
        Thing {
            name: name.to_owned(),
            version: Revision::ZERO,
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// An informer over a `Selecting` source keeping `a`, `b` and `d`,
    /// with a count of the deletions it delivered.
    struct World {
        informer: Informer<Thing>,
        source: Arc<Selecting>,
        kept: Kept,
        changes: Arc<ScopeChanges>,
        deleted: Arc<AtomicUsize>,
        _deletions: crate::informer::Subscription<Thing>,
    }

    fn world() -> World {
        let store = MemoryStore::new("things");
        store.put(thing("a"));
        store.put(thing("b"));
        store.put(thing("d"));
        let kept: Kept = Arc::new(Mutex::new(["a", "b", "d"].map(str::to_owned).into()));
        let changes = Arc::new(ScopeChanges::new());
        let keeps = {
            let kept = Arc::clone(&kept);
            move |name: &String| kept.lock().contains(name)
        };
        let count = ShardCount::new(1).expect("valid");
        let scope = CacheScope::new(keeps, Vec::new, count, Arc::clone(&changes));
        let source = Arc::new(Selecting {
            store,
            kept: Arc::clone(&kept),
            lists: AtomicUsize::new(0),
            before: Semaphore::new(0),
            after: Semaphore::new(0),
        });
        let informer = Informer::builder_from_arc(source.clone())
            .scope(scope)
            .build()
            .expect("valid");
        let deleted = Arc::new(AtomicUsize::new(0));
        let _deletions = informer.subscribe({
            let deleted = Arc::clone(&deleted);
            move |event: &Event<Thing>| {
                if matches!(event, Event::Deleted(_)) {
                    deleted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        World {
            informer,
            source,
            kept,
            changes,
            deleted,
            _deletions,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_during_which_the_scope_shrank_deletes_only_what_the_next_list_lacks() {
        let World {
            informer,
            source,
            kept,
            changes,
            deleted,
            _deletions,
        } = world();
        let stop = CancellationToken::new();
        let running = tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        until("the first list", || informer.cache().len() == 3).await;
        kept.lock().insert("c".to_owned());
        changes.widen();
        until("a second list", || {
            source.lists.load(Ordering::Acquire) == 2
        })
        .await;
        kept.lock().remove("b");
        changes.narrow();
        let client = source.store.client();
        client.delete(&"d".to_owned()).await.expect("deleted");
        source.before.add_permits(1);
        until("the list's selector read", || {
            source.before.available_permits() == 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        kept.lock().insert("b".to_owned());
        let growth = changes.widen();
        source.after.add_permits(1);
        source.before.add_permits(100);
        source.after.add_permits(100);
        until("a list that fills the last growth", || {
            source.lists.load(Ordering::Acquire) >= 3 && informer.cache().len() == 2
        })
        .await;
        changes.filled(growth).await;
        let cached = informer
            .cache()
            .list()
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>();
        assert!(
            informer.cache().get(&"d".to_owned()).is_none(),
            "{cached:?}"
        );
        assert_eq!(
            deleted.load(Ordering::Relaxed),
            1,
            "d's deletion delivered by the list after the unsure one, b not deleted"
        );
        stop.cancel();
        running.await.expect("joined").expect("ran");
    }
}
