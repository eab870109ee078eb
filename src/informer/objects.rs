//! The cache's objects by key. An object that lends its key
//! ([`Object::key_ref`]) is found by the key inside it: the table keeps a
//! copy of a key only for an object that does not lend one, so a cache of
//! such objects holds each key once, in its object.

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

impl<O: Object> Entry<O> {
    fn new(key: Cow<'_, O::Key>, object: Arc<O>) -> Self {
        let lent = object.key_ref().is_some_and(|lent| *lent == *key);
        Self {
            key: (!lent).then(|| Box::new(key.into_owned())),
            object,
        }
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
        let found = self.table.find(self.hash(key), |e| *e.key() == *key);
        found.map(|entry| &entry.object)
    }

    /// The cached object, to replace with a newer state of it.
    pub(crate) fn get_mut(&mut self, key: &O::Key) -> Option<&mut Arc<O>> {
        let hash = self.hash(key);
        let found = self.table.find_mut(hash, |e| *e.key() == *key);
        found.map(|entry| &mut entry.object)
    }

    pub(crate) fn contains_key(&self, key: &O::Key) -> bool {
        self.get(key).is_some()
    }

    /// Caches `object` under `key` (copied only if the object does not
    /// lend it), returning what was cached there.
    pub(crate) fn insert(&mut self, key: Cow<'_, O::Key>, object: Arc<O>) -> Option<Arc<O>> {
        if let Some(cached) = self.get_mut(&key) {
            return Some(std::mem::replace(cached, object));
        }
        let hasher = &self.hasher;
        let entry = Entry::new(key, object);
        let hash = hasher.hash_one(&*entry.key());
        self.table
            .insert_unique(hash, entry, |e| hasher.hash_one(&*e.key()));
        None
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
