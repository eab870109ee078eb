//! The shared cache: one writer (the informer) and many cheap read handles.
//!
//! # Invariants
//!
//! - An object and its index entries change together, under one write lock:
//!   readers never see one without the other.
//! - For every index, a key is listed under a value if and only if the index
//!   function returns that value for the cached object with that key.
//! - A relist builds the new cache beside the old one and swaps it in under
//!   the write lock: readers see the old cache or the new one, never a mix.
//!
//! # Lock order
//!
//! The informer's subscriber lock, then this cache's lock. Readers take only
//! the cache's lock, briefly; no lock is held across an `.await`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::watch;

use super::InformerError;
use super::diff::Diff;
use super::dispatch::Keyed;
use super::objects::Objects;
use super::reads::{Filter, Read, ReadHook};
use super::scope::CacheScope;
use crate::object::{Object, Revision};

/// A value an index files objects under (e.g. an owner's name).
pub type IndexValue = String;

/// A user index function: the values an object is filed under.
pub(crate) type IndexFn<O> = Arc<dyn Fn(&O) -> Vec<IndexValue> + Send + Sync>;

/// A transform applied to every object before it is cached.
pub(crate) type TransformFn<O> = Arc<dyn Fn(O) -> O + Send + Sync>;

/// A read handle on an informer's cache; cheap to clone.
///
/// Values are shared `Arc`s: reading never copies an object. Everything a
/// reader sees is a state the source was in (never a half-applied change),
/// though possibly an older one than the source's current state.
///
/// # Examples
///
/// Reads from an informer's cache, by key and through an index:
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Informer, Revision};
///
/// #[derive(Clone, Debug)]
/// struct Pod { name: String, node: String, version: Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pods = MemoryStore::new("pods");
/// for (name, node) in [("web-1", "n1"), ("web-2", "n2"), ("db-1", "n1")] {
///     let pod = Pod { name: name.into(), node: node.into(), version: Revision::ZERO };
///     pods.client().create(pod).await?;
/// }
/// let informer = Informer::builder(pods.clone())
///     .index("node", |pod: &Pod| vec![pod.node.clone()])
///     .build()?;
/// let stop = CancellationToken::new();
/// let watching = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
///
/// let store = informer.cache();
/// store.wait_synced(Duration::from_secs(5)).await?;
/// assert_eq!(store.len(), 3);
/// assert_eq!(store.get(&"web-2".to_owned()).unwrap().node, "n2");
/// let mut on_n1 = store.keys_by_index("node", "n1")?;
/// on_n1.sort();
/// assert_eq!(on_n1, ["db-1", "web-1"]);
/// stop.cancel();
/// watching.await??;
/// # Ok(()) }
/// ```
pub struct Cache<O: Object> {
    shared: Arc<StoreShared<O>>,
    /// Told of each read (a handle given to a reconcile that tracks reads).
    hook: Option<Arc<dyn ReadHook<O>>>,
}

struct StoreShared<O: Object> {
    name: Arc<str>,
    index_names: Vec<Arc<str>>,
    index_fns: Vec<IndexFn<O>>,
    cache: RwLock<Entries<O>>,
    synced: watch::Sender<bool>,
    /// The revision the cache reflects: every change up to it is applied.
    applied: watch::Sender<Revision>,
}

/// The cached objects and their index entries.
pub(crate) struct Entries<O: Object> {
    objects: Objects<O>,
    /// One map per index, in registration order.
    indexes: Vec<HashMap<IndexValue, HashSet<O::Key>>>,
}

/// What [`Cache::apply`] did.
pub(crate) enum Applied<O> {
    /// The object replaced this one (or was new).
    Stored(Option<Arc<O>>),
    /// The cached object is as new or newer: nothing changed.
    Stale,
}

/// What [`Cache::remove`] did.
pub(crate) enum Removed<O> {
    /// The object was removed.
    Gone(Arc<O>),
    /// The cached object is newer than the deletion: nothing changed.
    Stale,
    /// Nothing was cached under the key.
    Absent,
}

impl<O: Object> Clone for Cache<O> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            hook: self.hook.clone(),
        }
    }
}

impl<O: Object> fmt::Debug for Cache<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("source", &self.shared.name)
            .field("len", &self.len())
            .field("indexes", &self.shared.index_names)
            .field("synced", &self.is_synced())
            .field("tracked", &self.hook.is_some())
            .finish()
    }
}

impl<O: Object> Cache<O> {
    pub(crate) fn new(name: Arc<str>, indexes: Vec<(Arc<str>, IndexFn<O>)>) -> Self {
        let (index_names, index_fns): (Vec<_>, Vec<_>) = indexes.into_iter().unzip();
        let cache = Entries::empty(index_fns.len());
        let (synced, _) = watch::channel(false);
        let (applied, _) = watch::channel(Revision::ZERO);
        Self {
            shared: Arc::new(StoreShared {
                name,
                index_names,
                index_fns,
                cache: RwLock::new(cache),
                synced,
                applied,
            }),
            hook: None,
        }
    }

    /// This cache, with every read told to `hook` first.
    pub(crate) fn hooked(&self, hook: Arc<dyn ReadHook<O>>) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            hook: Some(hook),
        }
    }

    /// Whether `other` reads the same cache.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn heard(&self, read: Read<'_, O>) {
        if let Some(hook) = &self.hook {
            hook.read(read);
        }
    }

    /// The revision this cache reflects: every change of the source up to
    /// it has been applied (published after each list and each run of watch
    /// events). A write that returned revision `R` is visible here once this
    /// is `R` or later.
    #[must_use]
    pub fn revision(&self) -> Revision {
        *self.shared.applied.borrow()
    }

    /// Follows [`revision`](Self::revision) as it grows.
    pub(crate) fn revisions(&self) -> watch::Receiver<Revision> {
        self.shared.applied.subscribe()
    }

    /// The name of the source this cache mirrors.
    #[must_use]
    pub fn source_name(&self) -> &str {
        &self.shared.name
    }

    /// The cached object with this key.
    #[must_use]
    pub fn get(&self, key: &O::Key) -> Option<Arc<O>> {
        self.heard(Read::Key(key));
        self.shared.cache.read().objects.get(key).cloned()
    }

    /// Every cached object, in no particular order.
    #[must_use]
    pub fn list(&self) -> Vec<Arc<O>> {
        self.heard(Read::All);
        self.shared.cache.read().objects.values().cloned().collect()
    }

    /// Every cached object `filter` passes, in no particular order.
    ///
    /// # Examples
    ///
    /// ```
    /// # use tend::{Filter, Informer, Revision};
    /// # use tend::memory::MemoryStore;
    /// # #[derive(Clone, Debug)] struct Pod { name: String, ready: bool, version: Revision }
    /// # tend::impl_object!(Pod, key: name: String, version: version);
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pods = MemoryStore::new("pods");
    /// pods.put(Pod { name: "web-1".into(), ready: true, version: Revision::ZERO });
    /// pods.put(Pod { name: "web-2".into(), ready: false, version: Revision::ZERO });
    /// let informer = Informer::builder(pods).build()?;
    /// # let stop = tend::CancellationToken::new();
    /// # let running = tokio::spawn({ let (i, s) = (informer.clone(), stop.clone()); async move { i.run(s).await } });
    /// let cache = informer.cache();
    /// cache.wait_synced(std::time::Duration::from_secs(5)).await?;
    /// let ready = Filter::new("ready", |pod: &Pod| pod.ready);
    /// let names: Vec<_> = cache.list_where(&ready).iter().map(|p| p.name.clone()).collect();
    /// assert_eq!(names, ["web-1"]);
    /// # stop.cancel();
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn list_where(&self, filter: &Filter<O>) -> Vec<Arc<O>> {
        self.heard(Read::Filter(filter));
        let cache = self.shared.cache.read();
        let passed = cache.objects.values().filter(|o| filter.matches(o));
        passed.cloned().collect()
    }

    /// The number of cached objects.
    #[must_use]
    pub fn len(&self) -> usize {
        self.heard(Read::All);
        self.shared.cache.read().objects.len()
    }

    /// Whether the cache holds no object.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The names of the indexes, in registration order.
    #[must_use]
    pub fn index_names(&self) -> Vec<&str> {
        self.shared.index_names.iter().map(AsRef::as_ref).collect()
    }

    /// Every cached object that index `index` files under `value`.
    ///
    /// # Errors
    ///
    /// [`InformerError::UnknownIndex`] when no index named `index` was
    /// registered.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<O>>, InformerError> {
        let position = self.index_position(index)?;
        self.heard(Read::Objects {
            index: position,
            value,
        });
        let cache = self.shared.cache.read();
        let Some(keys) = cache.indexes[position].get(value) else {
            return Ok(Vec::new());
        };
        Ok(keys
            .iter()
            .filter_map(|key| cache.objects.get(key).cloned())
            .collect())
    }

    /// The keys that index `index` files under `value`.
    ///
    /// # Errors
    ///
    /// [`InformerError::UnknownIndex`] when no index named `index` was
    /// registered.
    pub fn keys_by_index(&self, index: &str, value: &str) -> Result<Vec<O::Key>, InformerError> {
        let position = self.index_position(index)?;
        self.heard(Read::Keys {
            index: position,
            value,
        });
        let cache = self.shared.cache.read();
        Ok(cache.indexes[position]
            .get(value)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Whether the first full list has been applied.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// Waits until the first full list has been applied.
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
        let mut synced = self.shared.synced.subscribe();
        match tokio::time::timeout(timeout, synced.wait_for(|synced| *synced)).await {
            Ok(_) => Ok(()),
            Err(_) => Err(InformerError::SyncTimeout {
                source_name: self.shared.name.to_string(),
                timeout,
            }),
        }
    }

    /// The values the index at `position` files `object` under.
    pub(crate) fn index_values(&self, position: usize, object: &O) -> Vec<IndexValue> {
        self.shared
            .index_fns
            .get(position)
            .map(|function| function(object))
            .unwrap_or_default()
    }

    /// The name of the index at `position`.
    pub(crate) fn index_name(&self, position: usize) -> &str {
        self.shared.index_names.get(position).map_or("", |n| n)
    }

    fn index_position(&self, index: &str) -> Result<usize, InformerError> {
        self.shared
            .index_names
            .iter()
            .position(|name| &**name == index)
            .ok_or_else(|| InformerError::UnknownIndex {
                source_name: self.shared.name.to_string(),
                index: index.to_owned(),
            })
    }

    // ----- the writer's side (crate-private, used by the informer only) -----

    /// Publishes that every change up to `revision` is applied.
    pub(crate) fn publish(&self, revision: Revision) {
        self.shared.applied.send_if_modified(|applied| {
            let newer = revision > *applied;
            if newer {
                *applied = revision;
            }
            newer
        });
    }

    pub(crate) fn mark_synced(&self) {
        self.shared
            .synced
            .send_if_modified(|synced| !std::mem::replace(synced, true));
    }

    /// Caches `object` under `key` unless the cached one is as new or newer.
    ///
    /// The caller keeps its key (for the event): an update takes one lookup
    /// and no clone; a creation copies the key only if `object` does not
    /// lend it.
    pub(crate) fn apply(&self, key: &O::Key, object: Arc<O>) -> Applied<O> {
        let shared = &*self.shared;
        let mut cache = shared.cache.write();
        // Kept for the indexes, if there are any.
        let new = (!shared.index_fns.is_empty()).then(|| Arc::clone(&object));
        let old = match cache.objects.slot(key) {
            Some(slot) if slot.object().version() >= object.version() => return Applied::Stale,
            Some(slot) => Some(slot.replace(key, object)),
            None => {
                cache.objects.insert_new(Cow::Borrowed(key), object);
                None
            }
        };
        if let Some(new) = new {
            cache.reindex(&shared.index_fns, key, old.as_deref(), Some(&new));
        }
        Applied::Stored(old)
    }

    /// Removes the object cached under `key` unless it is newer than
    /// `revision`.
    pub(crate) fn remove(&self, key: &O::Key, revision: Revision) -> Removed<O> {
        let shared = &*self.shared;
        let mut cache = shared.cache.write();
        match cache.objects.get(key) {
            None => return Removed::Absent,
            Some(cached) if cached.version() > revision => return Removed::Stale,
            Some(_) => {}
        }
        match cache.take(&shared.index_fns, key) {
            Some(old) => Removed::Gone(old),
            None => Removed::Absent,
        }
    }

    /// Replaces the whole cache with `listed`, returning
    /// the events that turn the old cache into the new one (when
    /// `with_events`) and the number of listed objects older than their
    /// cached state (those keep the cached state).
    ///
    /// The new cache is built beside the old one under a read lock (readers
    /// keep reading), then swapped in under the write lock. The old cache is
    /// dropped by the caller, outside every lock.
    ///
    /// With a `scope`, a listed object it does not keep is left out, and a
    /// cached one it does not keep is dropped with no event. When the
    /// scope `shrank` since the list began (asked after the scope's last
    /// answer, so that a shard dropped and kept again meanwhile shows), the
    /// list may have left out what the scope keeps now: a cached object it
    /// lacks that the scope keeps stays as it is (`Replaced::carried`).
    pub(crate) fn replace(
        &self,
        listed: Vec<O>,
        initial: bool,
        with_events: bool,
        scope: Option<&CacheScope<O::Key>>,
        shrank: &dyn Fn() -> bool,
    ) -> Replaced<O> {
        let shared = &*self.shared;
        // A first list turns every object into an event.
        let expected = if with_events && initial {
            listed.len()
        } else {
            0
        };
        let mut diff = Diff {
            events: Vec::with_capacity(expected),
            stale: 0,
            initial,
            with_events,
        };
        let mut fresh = Entries::with_capacity(shared.index_fns.len(), listed.len());
        let (out_of_scope, carried);
        {
            let old = shared.cache.read();
            out_of_scope = fresh.fill(listed, &old, scope, &mut diff);
            // Wanted for the events, or for a scope's carry-over.
            let gone = if with_events || scope.is_some() {
                old.vanished(&fresh, scope)
            } else {
                Vec::new()
            };
            carried = scope.is_some() && !gone.is_empty() && shrank();
            if carried {
                fresh.objects.extend(gone);
            } else {
                diff.vanished(gone);
            }
        }
        fresh.index_all(&shared.index_fns);
        let old = std::mem::replace(&mut *shared.cache.write(), fresh);
        Replaced {
            events: diff.events,
            stale: diff.stale,
            out_of_scope,
            carried,
            old,
        }
    }

    /// Drops every cached object `scope` no longer keeps (no event: nothing
    /// was deleted), returning them to be freed outside every lock.
    pub(crate) fn evict(&self, scope: &CacheScope<O::Key>) -> Vec<Arc<O>> {
        let shared = &*self.shared;
        let mut cache = shared.cache.write();
        let out: Vec<O::Key> = (cache.objects.iter())
            .filter(|(key, _)| !scope.keeps(key))
            .map(|(key, _)| key.into_owned())
            .collect();
        let fns = &shared.index_fns;
        out.iter().filter_map(|key| cache.take(fns, key)).collect()
    }

    /// Every cached object with its key, for resyncs and late subscribers:
    /// the keys come from the cache, not from `Object::key` (user code).
    pub(crate) fn snapshot(&self) -> Vec<(O::Key, Arc<O>)> {
        let cache = self.shared.cache.read();
        let entries = cache.objects.iter();
        entries
            .map(|(k, o)| (k.into_owned(), Arc::clone(o)))
            .collect()
    }

    /// Every cached key (see [`snapshot`](Self::snapshot)).
    pub(crate) fn keys(&self) -> Vec<O::Key> {
        self.shared.cache.read().objects.keys().collect()
    }
}

/// The outcome of [`Cache::replace`].
pub(crate) struct Replaced<O: Object> {
    pub(crate) events: Vec<Keyed<O>>,
    pub(crate) stale: u64,
    /// Listed objects the scope does not keep.
    pub(crate) out_of_scope: u64,
    /// Objects the list lacked were kept as cached: the scope shrank while
    /// it ran (see [`Cache::replace`]).
    pub(crate) carried: bool,
    /// The replaced cache, to drop outside every lock.
    pub(crate) old: Entries<O>,
}

impl<O: Object> Entries<O> {
    fn empty(indexes: usize) -> Self {
        Self::with_capacity(indexes, 0)
    }

    fn with_capacity(indexes: usize, objects: usize) -> Self {
        Self {
            objects: Objects::with_capacity(objects),
            indexes: (0..indexes).map(|_| HashMap::new()).collect(),
        }
    }

    /// Caches `listed` (those `scope` keeps, if any), each as `diff` keeps
    /// it against `old`; returns how many the scope did not keep.
    fn fill(
        &mut self,
        listed: Vec<O>,
        old: &Self,
        scope: Option<&CacheScope<O::Key>>,
        diff: &mut Diff<O>,
    ) -> u64 {
        let mut out_of_scope = 0;
        for object in listed {
            let key = object.key();
            if scope.is_some_and(|scope| !scope.keeps(&key)) {
                out_of_scope += 1;
                continue;
            }
            let kept = diff.keep(&key, old.objects.get(&key), object);
            self.objects.insert(Cow::Owned(key), kept);
        }
        out_of_scope
    }

    /// This cache's objects that `fresh` lacks and `scope` (if any) keeps.
    fn vanished(&self, fresh: &Self, scope: Option<&CacheScope<O::Key>>) -> Vec<(O::Key, Arc<O>)> {
        let gone = self.objects.iter().filter(|(key, _)| {
            !fresh.objects.contains_key(key) && scope.is_none_or(|s| s.keeps(key))
        });
        gone.map(|(key, object)| (key.into_owned(), Arc::clone(object)))
            .collect()
    }

    /// Removes `key`'s object and its index entries.
    fn take(&mut self, fns: &[IndexFn<O>], key: &O::Key) -> Option<Arc<O>> {
        let old = self.objects.remove(key)?;
        if !fns.is_empty() {
            self.reindex(fns, key, Some(&old), None);
        }
        Some(old)
    }

    /// Moves `key`'s entries from `old`'s index values to `new`'s.
    fn reindex(&mut self, fns: &[IndexFn<O>], key: &O::Key, old: Option<&O>, new: Option<&O>) {
        for (index, function) in self.indexes.iter_mut().zip(fns) {
            let old_values = old.map(|object| function(object)).unwrap_or_default();
            let new_values = new.map(|object| function(object)).unwrap_or_default();
            if old_values == new_values {
                continue;
            }
            for value in &old_values {
                if let Some(keys) = index.get_mut(value) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(value);
                    }
                }
            }
            for value in new_values {
                index.entry(value).or_default().insert(key.clone());
            }
        }
    }

    fn index_all(&mut self, fns: &[IndexFn<O>]) {
        for (index, function) in self.indexes.iter_mut().zip(fns) {
            for (key, object) in self.objects.iter() {
                for value in function(object) {
                    index.entry(value).or_default().insert(O::Key::clone(&key));
                }
            }
        }
    }
}
