//! The cache's objects by key. An object that lends its key
//! ([`Object::key_ref`]) is found by the key inside it: the table keeps a
//! copy of a key only for an object that does not lend one, so a cache of
//! such objects holds each key once, in its object. A slot is two
//! pointers; a key not lent is boxed (one allocation more per object than
//! a map holding the key in its slot: about the same bytes for a 48-byte
//! `ObjectKey`, 8 more for a `u64`).

use std::borrow::Cow;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::object::Object;

/// See the module docs.
pub(crate) struct Objects<O: Object> {
    table: HashTable<Entry<O>>,
    hasher: RandomState,
}

struct Entry<O: Object> {
    /// `None` while the object lends its key. Boxed, so that a slot of a
    /// lent key is two pointers, whatever the key's size.
    key: Option<Box<O::Key>>,
    object: Arc<O>,
}

/// Whether `object` lends `key`.
fn lends<O: Object>(object: &O, key: &O::Key) -> bool {
    object.key_ref().is_some_and(|lent| lent == key)
}

impl<O: Object> Entry<O> {
    fn new(key: Cow<'_, O::Key>, object: Arc<O>) -> Self {
        Self {
            key: (!lends(&*object, &key)).then(|| Box::new(key.into_owned())),
            object,
        }
    }

    /// Puts `object`, a newer state under the same `key`, in place of the
    /// cached one (a copy of the key kept only if it does not lend it).
    fn replace(&mut self, key: &O::Key, object: Arc<O>) -> Arc<O> {
        let old = std::mem::replace(&mut self.object, object);
        if lends(&*self.object, key) {
            self.key = None;
        } else if self.key.is_none() {
            self.key = Some(Box::new(key.clone()));
        }
        old
    }

    /// The key: the copy, else the object's; an object that stopped
    /// lending its key (no sane one does) is asked for it by value.
    fn key(&self) -> Cow<'_, O::Key> {
        match (&self.key, self.object.key_ref()) {
            (Some(key), _) => Cow::Borrowed(key),
            (None, Some(key)) => Cow::Borrowed(key),
            (None, None) => Cow::Owned(self.object.key()),
        }
    }
}

impl<O: Object> Objects<O> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            table: HashTable::with_capacity(capacity),
            hasher: RandomState::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    fn hash(&self, key: &O::Key) -> u64 {
        self.hasher.hash_one(key)
    }

    pub(crate) fn get(&self, key: &O::Key) -> Option<&Arc<O>> {
        // A first list looks every key up in the empty cache: no hashing.
        if self.table.is_empty() {
            return None;
        }
        let found = self.table.find(self.hash(key), |e| *e.key() == *key);
        found.map(|entry| &entry.object)
    }

    /// The cached state under `key`, to replace with a newer one.
    pub(crate) fn slot(&mut self, key: &O::Key) -> Option<Slot<'_, O>> {
        let hash = self.hash(key);
        self.table.find_mut(hash, |e| *e.key() == *key).map(Slot)
    }

    pub(crate) fn contains_key(&self, key: &O::Key) -> bool {
        self.get(key).is_some()
    }

    /// Caches `object` under `key` (copied only if the object does not
    /// lend it), returning what was cached there.
    pub(crate) fn insert(&mut self, key: Cow<'_, O::Key>, object: Arc<O>) -> Option<Arc<O>> {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(&*key);
        // One probe finds the key or where it goes.
        let rehash = |e: &Entry<O>| hasher.hash_one(&*e.key());
        match self.table.entry(hash, |e| *e.key() == *key, rehash) {
            hashbrown::hash_table::Entry::Occupied(mut found) => {
                Some(found.get_mut().replace(&key, object))
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(Entry::new(key, object));
                None
            }
        }
    }

    /// [`insert`](Self::insert) for a key not cached (no lookup first).
    pub(crate) fn insert_new(&mut self, key: Cow<'_, O::Key>, object: Arc<O>) {
        let hasher = &self.hasher;
        let entry = Entry::new(key, object);
        let hash = hasher.hash_one(&*entry.key());
        self.table
            .insert_unique(hash, entry, |e| hasher.hash_one(&*e.key()));
    }

    pub(crate) fn remove(&mut self, key: &O::Key) -> Option<Arc<O>> {
        let hash = self.hash(key);
        let found = self.table.find_entry(hash, |e| *e.key() == *key).ok()?;
        Some(found.remove().0.object)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Cow<'_, O::Key>, &Arc<O>)> {
        self.table.iter().map(|entry| (entry.key(), &entry.object))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<O>> {
        self.table.iter().map(|entry| &entry.object)
    }

    /// Every key, copied.
    pub(crate) fn keys(&self) -> impl Iterator<Item = O::Key> + '_ {
        self.table.iter().map(|entry| entry.key().into_owned())
    }
}

/// A cached state, found to be replaced ([`Objects::slot`]).
pub(crate) struct Slot<'a, O: Object>(&'a mut Entry<O>);

impl<O: Object> Slot<'_, O> {
    pub(crate) fn object(&self) -> &Arc<O> {
        &self.0.object
    }

    /// Puts `object`, a newer state under `key`, in place; returns the
    /// replaced one.
    pub(crate) fn replace(self, key: &O::Key, object: Arc<O>) -> Arc<O> {
        self.0.replace(key, object)
    }
}

impl<O: Object> Extend<(O::Key, Arc<O>)> for Objects<O> {
    fn extend<I: IntoIterator<Item = (O::Key, Arc<O>)>>(&mut self, entries: I) {
        for (key, object) in entries {
            self.insert(Cow::Owned(key), object);
        }
    }
}

impl<O: Object> fmt::Debug for Objects<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Objects").field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ObjectKey, Revision};

    #[derive(Clone, Debug)]
    struct Lent {
        key: ObjectKey,
        version: Revision,
    }
    crate::impl_object!(Lent, key: key: ObjectKey, version: version);

    /// An object that does not lend its key: the table keeps a copy.
    #[derive(Clone, Debug)]
    struct Kept(ObjectKey);

    impl Object for Kept {
        type Key = ObjectKey;
        fn key(&self) -> ObjectKey {
            self.0.clone()
        }
        fn version(&self) -> Revision {
            Revision::ZERO
        }
        fn set_version(&mut self, _: Revision) {}
    }

    fn key(n: usize) -> ObjectKey {
        ObjectKey::new("default", format!("object-{n}"))
    }

    #[test]
    fn a_lent_key_is_not_copied_and_is_found_through_growth() {
        let mut objects = Objects::with_capacity(0);
        for n in 0..1000 {
            let object = Arc::new(Lent {
                key: key(n),
                version: Revision::new(1),
            });
            assert!(objects.insert(Cow::Borrowed(&key(n)), object).is_none());
        }
        assert!(objects.table.iter().all(|entry| entry.key.is_none()));
        assert_eq!(objects.len(), 1000);
        assert!((0..1000).all(|n| objects.get(&key(n)).is_some_and(|o| o.key == key(n))));
        let newer = Arc::new(Lent {
            key: key(7),
            version: Revision::new(2),
        });
        let old = objects.insert(Cow::Owned(key(7)), newer);
        assert_eq!(old.map(|o| o.version), Some(Revision::new(1)));
        assert_eq!(
            objects.get(&key(7)).map(|o| o.version),
            Some(Revision::new(2))
        );
        assert_eq!(
            objects.remove(&key(7)).map(|o| o.version),
            Some(Revision::new(2))
        );
        assert!(!objects.contains_key(&key(7)));
        assert_eq!(objects.keys().count(), 999);
    }

    /// Lends its key only while `lend` is set.
    #[derive(Clone, Debug)]
    struct Sometimes {
        key: ObjectKey,
        lend: bool,
    }

    impl Object for Sometimes {
        type Key = ObjectKey;
        fn key(&self) -> ObjectKey {
            self.key.clone()
        }
        fn key_ref(&self) -> Option<&ObjectKey> {
            self.lend.then_some(&self.key)
        }
        fn version(&self) -> Revision {
            Revision::ZERO
        }
        fn set_version(&mut self, _: Revision) {}
    }

    #[test]
    fn a_replacement_that_does_not_lend_its_key_gets_a_copy_and_one_that_does_drops_it() {
        let mut objects = Objects::with_capacity(0);
        let lent = Arc::new(Sometimes {
            key: key(1),
            lend: true,
        });
        objects.insert_new(Cow::Owned(key(1)), lent);
        let kept = Arc::new(Sometimes {
            key: key(1),
            lend: false,
        });
        let replaced = objects
            .slot(&key(1))
            .map(|slot| slot.replace(&key(1), kept));
        assert!(replaced.is_some_and(|old| old.lend));
        assert!(objects.table.iter().all(|entry| entry.key.is_some()));
        assert!(objects.get(&key(1)).is_some_and(|o| !o.lend));
        // Lending again, it needs the copy no more.
        let lent = Arc::new(Sometimes {
            key: key(1),
            lend: true,
        });
        assert!(
            objects
                .insert(Cow::Owned(key(1)), lent)
                .is_some_and(|old| !old.lend)
        );
        assert!(objects.table.iter().all(|entry| entry.key.is_none()));
        assert!(objects.get(&key(1)).is_some_and(|o| o.lend));
    }

    #[test]
    fn a_key_not_lent_is_kept_as_a_copy() {
        let mut objects = Objects::with_capacity(4);
        objects.extend((0..100).map(|n| (key(n), Arc::new(Kept(key(n))))));
        assert!(objects.table.iter().all(|entry| entry.key.is_some()));
        assert!((0..100).all(|n| objects.get(&key(n)).is_some()));
        let mut keys: Vec<_> = objects.iter().map(|(key, _)| key.into_owned()).collect();
        keys.sort();
        let mut expected: Vec<_> = (0..100).map(key).collect();
        expected.sort();
        assert_eq!(keys, expected);
    }
}
