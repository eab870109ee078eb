//! One tracked source's record: what each key's reconciles read of it
//! (forward), who read each dependency (reverse), and the keys a change
//! of the source wakes.
//!
//! # Invariants
//!
//! - The reverse maps hold exactly the edges of the forward one: key `k` is
//!   under dependency `d` if and only if `d` is in `k`'s last or running
//!   reads (`Record::check` in the tests verifies it after every step).
//! - A key whose reads are empty has no entry: a forgotten or never-read key
//!   costs nothing.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use foldhash::fast::RandomState;

use super::ReadCause;
use crate::informer::{Filter, IndexValue, Read};
use crate::object::Object;

type Map<K, V> = HashMap<K, V, RandomState>;
type Set<T> = HashSet<T, RandomState>;

/// Past this many distinct reads of one source in one reconcile, the next
/// is recorded as a read of every object: a key's record stays bounded,
/// and still wakes it on every change it may depend on.
pub(super) const MAX_READS: usize = 1024;

/// One dependency: a read, as recorded.
pub(super) enum Dep<P: Object> {
    Key(P::Key),
    Objects(usize, IndexValue),
    Keys(usize, IndexValue),
    All,
    Filter(Filter<P>),
}

impl<P: Object> Dep<P> {
    pub(super) fn of(read: Read<'_, P>) -> Self {
        match read {
            Read::Key(key) => Self::Key(key.clone()),
            Read::Objects { index, value } => Self::Objects(index, value.to_owned()),
            Read::Keys { index, value } => Self::Keys(index, value.to_owned()),
            Read::All => Self::All,
            Read::Filter(filter) => Self::Filter(filter.clone()),
        }
    }
}

impl<P: Object> Clone for Dep<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Key(key) => Self::Key(key.clone()),
            Self::Objects(index, value) => Self::Objects(*index, value.clone()),
            Self::Keys(index, value) => Self::Keys(*index, value.clone()),
            Self::All => Self::All,
            Self::Filter(filter) => Self::Filter(filter.clone()),
        }
    }
}

impl<P: Object> PartialEq for Dep<P> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Key(a), Self::Key(b)) => a == b,
            (Self::Objects(i, a), Self::Objects(j, b)) | (Self::Keys(i, a), Self::Keys(j, b)) => {
                i == j && a == b
            }
            (Self::All, Self::All) => true,
            (Self::Filter(a), Self::Filter(b)) => a.id() == b.id(),
            _ => false,
        }
    }
}

impl<P: Object> Eq for Dep<P> {}

impl<P: Object> Hash for Dep<P> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Self::Key(key) => key.hash(state),
            Self::Objects(index, value) | Self::Keys(index, value) => (index, value).hash(state),
            Self::All => {}
            Self::Filter(filter) => filter.id().hash(state),
        }
    }
}

/// Which read of a key a change touched (the first found), for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why<'a> {
    Key,
    Objects(usize, &'a str),
    Keys(usize, &'a str),
    All,
    Filter(&'a str),
}

/// One key's reads of the source.
struct Reads<P: Object> {
    /// Its last finished reconcile's.
    last: Set<Dep<P>>,
    /// Its running reconcile's, so far (a change of them wakes it too).
    running: Set<Dep<P>>,
}

impl<P: Object> Default for Reads<P> {
    fn default() -> Self {
        Self {
            last: Set::default(),
            running: Set::default(),
        }
    }
}

/// See the module docs.
pub(super) struct Record<P: Object, K> {
    readers: Map<K, Reads<P>>,
    reverse: Reverse<P, K>,
    /// What last woke each key, until its reconcile begins.
    causes: Map<K, ReadCause>,
}

/// The reading keys of each dependency.
struct Reverse<P: Object, K> {
    by_key: Map<P::Key, Set<K>>,
    /// Per index (by position): readers of the objects under a value …
    objects: Vec<Map<IndexValue, Set<K>>>,
    /// … and readers of only which keys are there.
    keys: Vec<Map<IndexValue, Set<K>>>,
    all: Set<K>,
    filters: Map<usize, (Filter<P>, Set<K>)>,
}

impl<P: Object, K: crate::QueueKey> Record<P, K> {
    pub(super) fn new() -> Self {
        Self {
            readers: Map::default(),
            reverse: Reverse::empty(),
            causes: Map::default(),
        }
    }

    /// `key`'s running reconcile read `dep`.
    pub(super) fn note(&mut self, key: &K, dep: Dep<P>) {
        if !self.readers.contains_key(key) {
            self.readers.insert(key.clone(), Reads::default());
        }
        let Some(reads) = self.readers.get_mut(key) else {
            return;
        };
        let dep = if reads.running.len() >= MAX_READS {
            Dep::All
        } else {
            dep
        };
        if reads.running.contains(&dep) {
            return;
        }
        if !reads.last.contains(&dep) {
            self.reverse.add(&dep, key);
        }
        reads.running.insert(dep);
    }

    /// `key`'s reconcile finished: its reads replace the last ones.
    pub(super) fn commit(&mut self, key: &K) {
        let Some(reads) = self.readers.get_mut(key) else {
            return;
        };
        let running = std::mem::take(&mut reads.running);
        for dep in reads.last.iter().filter(|dep| !running.contains(*dep)) {
            self.reverse.remove(dep, key);
        }
        reads.last = running;
        if reads.last.is_empty() {
            self.readers.remove(key);
            shrink(&mut self.readers);
        }
    }

    /// `key`'s reconcile was cancelled: its reads join the last ones (it
    /// runs again, and replaces them then).
    /// Past [`MAX_READS`] together they become one read of every object,
    /// so repeated cancellations keep the record bounded too.
    pub(super) fn merge(&mut self, key: &K) {
        let Some(reads) = self.readers.get_mut(key) else {
            return;
        };
        let running = std::mem::take(&mut reads.running);
        reads.last.extend(running);
        if reads.last.len() > MAX_READS {
            for dep in std::mem::take(&mut reads.last) {
                self.reverse.remove(&dep, key);
            }
            reads.last.insert(Dep::All);
            self.reverse.add(&Dep::All, key);
        }
    }

    /// Keys with reads on record, and keys with a cause kept.
    pub(super) fn held(&self) -> usize {
        self.readers.len() + self.causes.len()
    }

    /// What last woke `key`, taken.
    pub(super) fn cause(&mut self, key: &K) -> Option<ReadCause> {
        let cause = self.causes.remove(key);
        if cause.is_some() {
            shrink(&mut self.causes);
        }
        cause
    }

    /// `key` is gone: nothing it read wakes it any more.
    pub(super) fn forget(&mut self, key: &K) {
        if self.causes.remove(key).is_some() {
            shrink(&mut self.causes);
        }
        let Some(reads) = self.readers.remove(key) else {
            return;
        };
        shrink(&mut self.readers);
        let unique = reads.running.iter().filter(|d| !reads.last.contains(*d));
        for dep in reads.last.iter().chain(unique) {
            self.reverse.remove(dep, key);
        }
    }

    /// Calls `wake` once for every key that read something the change of
    /// the object under `key` from `old` to `new` touches (`None`: absent),
    /// with the first such read and whether the key has no cause kept yet,
    /// and keeps the cause it returns; `values` gives the values an index
    /// (by position) files an object under.
    pub(super) fn changed(
        &mut self,
        key: &P::Key,
        old: Option<&P>,
        new: Option<&P>,
        values: impl Fn(usize, &P) -> Vec<IndexValue>,
        mut wake: impl FnMut(&K, Why<'_>, bool) -> Option<ReadCause>,
    ) {
        if self.readers.is_empty() {
            return; // nothing read: no index values to compute
        }
        let reverse = &self.reverse;
        let indexes = reverse.objects.len().max(reverse.keys.len());
        let touched: Vec<Touched> = (0..indexes)
            .map(|index| reverse.touched(index, old, new, &values))
            .collect();
        let mut woken: Map<&K, Why<'_>> = Map::default();
        let mut touch = |readers, why| touch(&mut woken, readers, why);
        touch(reverse.by_key.get(key), Why::Key);
        for (index, values) in touched.iter().enumerate() {
            for value in &values.both {
                let readers = reverse.objects.get(index).and_then(|m| m.get(value));
                touch(readers, Why::Objects(index, value));
            }
            for value in &values.moved {
                let readers = reverse.keys.get(index).and_then(|m| m.get(value));
                touch(readers, Why::Keys(index, value));
            }
        }
        touch(Some(&reverse.all), Why::All);
        for (filter, readers) in reverse.filters.values() {
            let passes = |object: Option<&P>| object.is_some_and(|o| filter.matches(o));
            if passes(old) || passes(new) {
                touch(Some(readers), Why::Filter(filter.name()));
            }
        }
        for (reader, why) in woken {
            let first = !self.causes.contains_key(reader);
            if let Some(cause) = wake(reader, why, first) {
                self.causes.insert(reader.clone(), cause);
            }
        }
    }

    /// How many edges (a key, one of its reads) the record holds.
    #[cfg(test)]
    pub(super) fn edges(&self) -> usize {
        let unique = |r: &Reads<P>| r.running.iter().filter(|d| !r.last.contains(*d)).count();
        self.readers
            .values()
            .map(|r| r.last.len() + unique(r))
            .sum()
    }
    /// Every key with reads (for the tests).
    #[cfg(test)]
    pub(super) fn readers(&self) -> impl Iterator<Item = &K> {
        self.readers.keys()
    }

    /// Checks the invariant: the reverse maps hold exactly the forward
    /// one's edges.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut expected = Reverse::<P, K>::empty();
        for (key, reads) in &self.readers {
            assert!(
                !reads.last.is_empty() || !reads.running.is_empty(),
                "an empty entry is kept"
            );
            for dep in reads.last.union(&reads.running) {
                expected.add(dep, key);
            }
        }
        assert!(
            expected.same_as(&self.reverse),
            "the reverse maps hold other edges than the forward one"
        );
    }
}

/// The values of one index a change touches.
#[derive(Default)]
struct Touched {
    /// Every value the object was or is filed under: readers of the objects
    /// there see it change, arrive or leave.
    both: Vec<IndexValue>,
    /// The values it arrived at or left: readers of only the keys there.
    moved: Vec<IndexValue>,
}

impl<P: Object, K: crate::QueueKey> Reverse<P, K> {
    fn empty() -> Self {
        Self {
            by_key: Map::default(),
            objects: Vec::new(),
            keys: Vec::new(),
            all: Set::default(),
            filters: Map::default(),
        }
    }

    fn add(&mut self, dep: &Dep<P>, key: &K) {
        let readers = match dep {
            Dep::Key(read) => self.by_key.entry(read.clone()).or_default(),
            Dep::Objects(index, value) => grown(&mut self.objects, *index)
                .entry(value.clone())
                .or_default(),
            Dep::Keys(index, value) => grown(&mut self.keys, *index)
                .entry(value.clone())
                .or_default(),
            Dep::All => &mut self.all,
            Dep::Filter(filter) => {
                let entry = self.filters.entry(filter.id());
                &mut entry.or_insert_with(|| (filter.clone(), Set::default())).1
            }
        };
        readers.insert(key.clone());
    }

    fn remove(&mut self, dep: &Dep<P>, key: &K) {
        match dep {
            Dep::Key(read) => unread(&mut self.by_key, read, key),
            Dep::Objects(index, value) => {
                if let Some(values) = self.objects.get_mut(*index) {
                    unread(values, value, key);
                }
            }
            Dep::Keys(index, value) => {
                if let Some(values) = self.keys.get_mut(*index) {
                    unread(values, value, key);
                }
            }
            Dep::All => {
                self.all.remove(key);
            }
            Dep::Filter(filter) => {
                let id = filter.id();
                if let Some((_, readers)) = self.filters.get_mut(&id) {
                    readers.remove(key);
                    if readers.is_empty() {
                        self.filters.remove(&id);
                        shrink(&mut self.filters);
                    }
                }
            }
        }
    }

    /// The values of the index at `index` that a change from `old` to
    /// `new` touches, computed only when someone read that index.
    fn touched(
        &self,
        index: usize,
        old: Option<&P>,
        new: Option<&P>,
        values: impl Fn(usize, &P) -> Vec<IndexValue>,
    ) -> Touched {
        let read =
            |maps: &[Map<IndexValue, Set<K>>]| maps.get(index).is_some_and(|m| !m.is_empty());
        let (objects, keys) = (read(&self.objects), read(&self.keys));
        if !objects && !keys {
            return Touched::default();
        }
        let of = |object: Option<&P>| object.map(|o| values(index, o)).unwrap_or_default();
        let (old, new) = (of(old), of(new));
        let left = old.iter().filter(|v| !new.contains(v));
        let arrived = new.iter().filter(|v| !old.contains(v));
        let moved: Vec<IndexValue> = left.chain(arrived).cloned().collect();
        let both = if objects {
            let arrived: Vec<IndexValue> = new.into_iter().filter(|v| !old.contains(v)).collect();
            let mut both = old;
            both.extend(arrived);
            both
        } else {
            Vec::new()
        };
        Touched {
            both,
            moved: if keys { moved } else { Vec::new() },
        }
    }

    #[cfg(test)]
    fn same_as(&self, other: &Self) -> bool {
        let trimmed = |maps: &[Map<IndexValue, Set<K>>]| {
            let kept = maps.iter().enumerate().filter(|(_, m)| !m.is_empty());
            kept.map(|(i, m)| (i, m.clone())).collect::<Vec<_>>()
        };
        let filters = |f: &Map<usize, (Filter<P>, Set<K>)>| {
            f.iter()
                .map(|(id, (_, r))| (*id, r.clone()))
                .collect::<Map<_, _>>()
        };
        self.by_key == other.by_key
            && trimmed(&self.objects) == trimmed(&other.objects)
            && trimmed(&self.keys) == trimmed(&other.keys)
            && self.all == other.all
            && filters(&self.filters) == filters(&other.filters)
    }
}

/// Adds `readers` to `woken`, each with `why` unless there already.
fn touch<'a, K: crate::QueueKey>(
    woken: &mut Map<&'a K, Why<'a>>,
    readers: Option<&'a Set<K>>,
    why: Why<'a>,
) {
    for reader in readers.into_iter().flatten() {
        woken.entry(reader).or_insert(why);
    }
}

/// The map of the index at `index`, made (with those before it) if new.
fn grown<K>(maps: &mut Vec<Map<IndexValue, Set<K>>>, index: usize) -> &mut Map<IndexValue, Set<K>> {
    if maps.len() <= index {
        maps.resize_with(index + 1, Map::default);
    }
    &mut maps[index]
}

/// Takes `key` off the readers of `dep`, dropping the entry once it has none.
fn unread<D: Eq + std::hash::Hash, K: Eq + std::hash::Hash>(
    map: &mut Map<D, Set<K>>,
    dep: &D,
    key: &K,
) {
    if let Some(readers) = map.get_mut(dep) {
        readers.remove(key);
        if readers.is_empty() {
            map.remove(dep);
            shrink(map);
        }
    }
}

/// Gives back most of `map`'s table once it is three-quarters empty: a
/// burst of reads costs its memory only while it is read. (Halving at a
/// quarter full keeps the cost of growing and shrinking amortized.)
fn shrink<D: Eq + std::hash::Hash, V>(map: &mut Map<D, V>) {
    if map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}
