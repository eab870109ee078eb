//! Recently deleted keys, so that a reordered or duplicated change older
//! than a deletion cannot resurrect the object.
//!
//! Only a source that breaks the in-order contract needs this, and such
//! reorders are local: the informer keeps the most recent deletions in two
//! generations of at most [`GENERATION`] keys each (the older generation is
//! dropped when the newer one fills up), and forgets them all on every list
//! and every new watch.

use std::collections::HashMap;
use std::hash::Hash;

use crate::object::Revision;

/// The number of deletions one generation remembers.
const GENERATION: usize = 65_536;

/// Keys deleted recently, with the revision of their deletion.
#[derive(Debug)]
pub(crate) struct Tombstones<K> {
    current: HashMap<K, Revision>,
    previous: HashMap<K, Revision>,
}

impl<K: Eq + Hash> Tombstones<K> {
    pub(crate) fn new() -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }

    pub(crate) fn insert(&mut self, key: K, revision: Revision) {
        if self.current.len() >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, revision);
    }

    /// Whether `key` was deleted at or after `version`.
    pub(crate) fn covers(&self, key: &K, version: Revision) -> bool {
        if self.current.is_empty() && self.previous.is_empty() {
            return false;
        }
        self.current
            .get(key)
            .or_else(|| self.previous.get(key))
            .is_some_and(|deleted| *deleted >= version)
    }

    pub(crate) fn forget(&mut self, key: &K) {
        if !self.current.is_empty() {
            self.current.remove(key);
        }
        if !self.previous.is_empty() {
            self.previous.remove(key);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tombstone_covers_versions_up_to_its_deletion() {
        let mut tombstones = Tombstones::new();
        assert!(!tombstones.covers(&"a", Revision::new(1)));
        tombstones.insert("a", Revision::new(5));
        assert!(tombstones.covers(&"a", Revision::new(4)));
        assert!(tombstones.covers(&"a", Revision::new(5)));
        assert!(
            !tombstones.covers(&"a", Revision::new(6)),
            "a re-creation is newer"
        );
        tombstones.forget(&"a");
        assert!(!tombstones.covers(&"a", Revision::new(4)));
    }

    #[test]
    fn memory_is_bounded_to_two_generations() {
        let mut tombstones = Tombstones::new();
        for key in 0..GENERATION * 3 {
            tombstones.insert(key, Revision::new(key as u64));
        }
        assert!(tombstones.current.len() + tombstones.previous.len() <= 2 * GENERATION);
        let last = GENERATION * 3 - 1;
        assert!(
            tombstones.covers(&last, Revision::ZERO),
            "recent deletions are kept"
        );
        assert!(
            !tombstones.covers(&0, Revision::ZERO),
            "old ones are forgotten"
        );
        tombstones.clear();
        assert!(!tombstones.covers(&last, Revision::ZERO));
    }
}
