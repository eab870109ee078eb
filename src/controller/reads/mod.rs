//! Dependencies tracked from reads: a source registered with
//! [`ControllerBuilder::reads`](super::ControllerBuilder::reads) records
//! what each reconcile reads of it through
//! [`Context::cache`](super::Context::cache), and a change of the source
//! queues exactly the keys whose reconciles read what it touched, with
//! [`Trigger::Read`].
//!
//! - **Where reads are heard.** The reconcile's cache handle carries a hook
//!   (`ReadHook`, told of each read *before* it reads): a change applied
//!   after the hook is delivered after it too, and finds the read in the
//!   record; a change applied before is what the read sees. No change a
//!   reconcile may have missed goes unheard.
//! - **Replaced, not merged.** Reads go into the key's running set (and the
//!   reverse maps at once); when the reconcile ends they replace its last
//!   set, and a dependency no longer read stops waking it. A cancelled
//!   reconcile's reads join the last ones (it runs again). A reconcile that
//!   found its object gone, the primary's delete, and a key skipped as
//!   another replica's forget the key's record.
//! - **Bounded.** One entry per key with reads, one edge per (key, distinct
//!   read); past [`MAX_READS`](record::MAX_READS) reads of one source in one
//!   reconcile, the rest count as a read of every object.
//!
//! # Lock order
//!
//! A record's lock is a leaf: taken by a reconcile's read, by the worker
//! after the reconcile, and by the source's handler (under the informer's
//! subscriber lock) to find the keys a change wakes; nothing is taken under
//! it but the sharded ownership's slot lock, in the handler (`Keys::push`).

mod cause;
mod record;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

pub use self::cause::ReadCause;
use self::record::{Dep, Record, Why};
use super::context::Caches;
use super::sink::{Enqueue, Keys};
use super::watch::{Gather, Secondary, Synced, Watch, is_background, synced};
use super::{Outcome, Trigger};
use crate::informer::{Cache, CacheLag, Event, InformerId, Read, ReadHook};
use crate::object::Object;

/// A source whose reads are tracked (`reads`), with its record.
pub(crate) struct Reading<P: Object, K> {
    watch: Watch<P>,
    record: Arc<Mutex<Record<P, K>>>,
}

impl<P: Object, K: crate::QueueKey> Reading<P, K> {
    pub(crate) fn new(watch: Watch<P>) -> Self {
        Self {
            watch,
            record: Arc::new(Mutex::new(Record::new())),
        }
    }
}

impl<P: Object, K: crate::QueueKey> Secondary<K> for Reading<P, K> {
    fn subscribe(&self, sink: Enqueue<K>) -> Box<dyn Synced> {
        let record = Arc::clone(&self.record);
        let watch = self.watch.clone();
        let cache = self.watch.informer().cache();
        let controller: Arc<str> = sink.queue.name().into();
        let on_event = move |key: Cow<'_, P::Key>, event: &Event<P>, keys: &mut Keys<K>| {
            if !watch.passes(event) {
                return;
            }
            let (old, new) = match event {
                Event::Initial(new) => (None, Some(&**new)),
                Event::Applied { old, new } => (old.as_deref(), Some(&**new)),
                Event::Deleted(old) => (Some(&**old), None),
                Event::Resync(_) => return, // nothing changed
            };
            let background = is_background(event);
            let values = |index, object: &P| cache.index_values(index, object);
            record.lock().changed(&key, old, new, values, |reader, why, first| {
                if !keys.wants(reader) {
                    return None; // another replica's key
                }
                let source = cache.source_name();
                let read = Named(why, &cache);
                tracing::debug!(%controller, key = ?reader, source, changed = ?key, %read, "queued: a change of what its last reconcile read");
                keys.push_wanted(Cow::Borrowed(reader), Trigger::Read, background);
                // Named once per reconcile: later wakes before it runs coalesce.
                first.then(|| ReadCause::new(source, format!("{:?}", &*key), read.to_string()))
            });
        };
        let subscription = self
            .watch
            .informer()
            .subscribe_handler(Gather::new(sink, on_event));
        synced(subscription, self.watch.is_optional())
    }

    fn add_cache(&self, caches: &mut Caches) {
        let record = Arc::clone(&self.record) as Arc<dyn Any + Send + Sync>;
        caches.track(
            self.watch.informer().cache(),
            self.watch.is_optional(),
            record,
        );
    }

    fn informer_id(&self) -> InformerId {
        self.watch.informer().id()
    }

    fn optional(&self) -> bool {
        self.watch.is_optional()
    }

    fn lag(&self) -> Option<CacheLag> {
        self.watch.informer().lag()
    }

    fn tracked(&self) -> Option<Arc<dyn Remember<K>>> {
        Some(Arc::clone(&self.record) as Arc<dyn Remember<K>>)
    }
}

/// A read a change touched, as the log names it.
struct Named<'a, P: Object>(Why<'a>, &'a Cache<P>);

impl<P: Object> fmt::Display for Named<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(why, cache) = self;
        match why {
            Why::Key => f.write_str("its key"),
            Why::Objects(index, value) => write!(f, "index {}={value}", cache.index_name(*index)),
            Why::Keys(index, value) => {
                write!(f, "keys of index {}={value}", cache.index_name(*index))
            }
            Why::All => f.write_str("every object"),
            Why::Filter(name) => write!(f, "filter {name}"),
        }
    }
}

/// What the controller does with a source's record, its type erased.
pub(crate) trait Remember<K>: Send + Sync {
    /// `key`'s reconcile finished: its reads replace the last ones.
    fn commit(&self, key: &K);
    /// `key`'s reconcile was cancelled: its reads join the last ones.
    fn merge(&self, key: &K);
    /// `key` is gone, or not this replica's.
    fn forget(&self, key: &K);
    /// What last woke `key`, taken (its reconcile begins).
    fn cause(&self, key: &K) -> Option<ReadCause>;
    /// Keys with reads on record, and keys with a cause kept.
    fn held(&self) -> usize;
}

impl<P: Object, K: crate::QueueKey> Remember<K> for Mutex<Record<P, K>> {
    fn commit(&self, key: &K) {
        self.lock().commit(key);
    }

    fn merge(&self, key: &K) {
        self.lock().merge(key);
    }

    fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    fn cause(&self, key: &K) -> Option<ReadCause> {
        self.lock().cause(key)
    }

    fn held(&self) -> usize {
        self.lock().held()
    }
}

/// Every tracked source of a controller (`None` without any: no cost).
#[derive(Clone)]
pub(crate) struct Tracker<K>(Arc<[Arc<dyn Remember<K>>]>);

impl<K: crate::QueueKey> Tracker<K> {
    pub(crate) fn of(secondaries: &[Arc<dyn Secondary<K>>]) -> Option<Self> {
        let sources: Vec<_> = secondaries.iter().filter_map(|s| s.tracked()).collect();
        (!sources.is_empty()).then(|| Self(sources.into()))
    }

    /// What woke `key` through each tracked source, taken as its reconcile
    /// begins.
    pub(crate) fn causes(&self, key: &K) -> Vec<ReadCause> {
        self.0
            .iter()
            .filter_map(|source| source.cause(key))
            .collect()
    }

    /// Keys with reads on record, and keys with a cause kept, over every
    /// tracked source.
    pub(crate) fn held(&self) -> usize {
        self.0.iter().map(|source| source.held()).sum()
    }

    /// A recording of the reads of a reconcile of `key` about to start.
    pub(crate) fn start(&self, key: &K) -> Arc<Recording<K>> {
        Arc::new(Recording {
            key: key.clone(),
            open: AtomicBool::new(true),
        })
    }

    /// After the reconcile `recording` heard ended with `outcome`, having
    /// found its object or not (`existed`).
    pub(crate) fn settle(&self, recording: &Recording<K>, existed: bool, outcome: Outcome) {
        // A handle kept past the reconcile records nothing more.
        recording.open.store(false, Ordering::Release);
        let key = &recording.key;
        for source in self.0.iter() {
            match (existed, outcome) {
                (false, _) => source.forget(key),
                (true, Outcome::Cancelled) => source.merge(key),
                (true, _) => source.commit(key),
            }
        }
    }

    /// `key` is gone, or not this replica's: its reads wake it no more.
    pub(crate) fn forget(&self, key: &K) {
        for source in self.0.iter() {
            source.forget(key);
        }
    }
}

impl<K> fmt::Debug for Tracker<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tracker({} sources)", self.0.len())
    }
}

/// The reads of one reconcile, heard while it is open.
pub(crate) struct Recording<K> {
    key: K,
    open: AtomicBool,
}

/// Tells a source's record of the reads made through one cache handle.
struct Hook<P: Object, K> {
    record: Arc<Mutex<Record<P, K>>>,
    recording: Arc<Recording<K>>,
}

impl<P: Object, K: crate::QueueKey> ReadHook<P> for Hook<P, K> {
    fn read(&self, read: Read<'_, P>) {
        if !self.recording.open.load(Ordering::Acquire) {
            return;
        }
        let dep = Dep::of(read);
        let mut record = self.record.lock();
        // Again under the lock, which `settle`'s commit takes after closing:
        // a read that loses that race is not recorded at all.
        if self.recording.open.load(Ordering::Acquire) {
            record.note(&self.recording.key, dep);
        }
    }
}

/// `cache`, with its reads heard by `recording` into `record` (a
/// tracked source's, as `Caches` keeps it).
pub(crate) fn hooked<P: Object, K: crate::QueueKey>(
    cache: Cache<P>,
    record: &Arc<dyn Any + Send + Sync>,
    recording: &Arc<Recording<K>>,
) -> Cache<P> {
    match Arc::clone(record).downcast::<Mutex<Record<P, K>>>() {
        Ok(record) => cache.hooked(Arc::new(Hook {
            record,
            recording: Arc::clone(recording),
        })),
        Err(_) => cache,
    }
}
