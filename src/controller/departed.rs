//! A sharded controller's recent deletions of primary objects, whatever
//! their shard. When this replica gains a shard, its deleted keys are
//! queued too, with their last state: a deletion seen while the shard had
//! no owner, or still queued on its old owner at the handover (which skips
//! keys it no longer owns), is reconciled all the same. The cache the feed
//! reads no longer has those keys.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::object::Object;

/// How many deletions one generation keeps: the store remembers the last
/// 8,192 to 16,384 deletions (the older generation goes when the newer one
/// fills up), far more than a handover's few seconds see.
const GENERATION: usize = 8192;

/// See the module docs.
pub(super) struct Departed<O: Object> {
    /// Whether any deletion is kept: spares feeds the lock until the first
    /// deletion.
    any: AtomicBool,
    kept: Mutex<Generations<O>>,
}

struct Generations<O: Object> {
    current: HashMap<O::Key, Arc<O>>,
    previous: HashMap<O::Key, Arc<O>>,
}

impl<O: Object> Departed<O> {
    /// Deletions kept, over both generations.
    pub(super) fn len(&self) -> usize {
        let kept = self.kept.lock();
        kept.current.len() + kept.previous.len()
    }

    pub(super) fn new() -> Self {
        Self {
            any: AtomicBool::new(false),
            kept: Mutex::new(Generations {
                current: HashMap::new(),
                previous: HashMap::new(),
            }),
        }
    }

    /// `key`'s object was deleted; `last` is its last cached state.
    pub(super) fn deleted(&self, key: O::Key, last: &Arc<O>) {
        let mut kept = self.kept.lock();
        if kept.current.len() >= GENERATION {
            kept.previous = std::mem::take(&mut kept.current);
        }
        kept.previous.remove(&key);
        kept.current.insert(key, Arc::clone(last));
        self.any.store(true, Ordering::Release);
    }

    /// Takes the deletions of the keys `keep` passes and that do not
    /// `exist` again (both called outside the lock: `keep` is user code),
    /// handing each last state to `into` under the lock (so a newer
    /// deletion of the key cannot be overtaken by this one). A key created
    /// again is checked here, once per feed, rather than forgotten on every
    /// event: its kept deletion ages out with its generation.
    pub(super) fn take_where(
        &self,
        keep: impl Fn(&O::Key) -> bool,
        exists: impl Fn(&O::Key) -> bool,
        mut into: impl FnMut(&O::Key, &Arc<O>),
    ) -> Vec<O::Key> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let keys: Vec<O::Key> = {
            let kept = self.kept.lock();
            kept.current
                .keys()
                .chain(kept.previous.keys())
                .cloned()
                .collect()
        };
        let wanted: Vec<O::Key> = keys
            .into_iter()
            .filter(|key| keep(key) && !exists(key))
            .collect();
        let mut kept = self.kept.lock();
        wanted
            .into_iter()
            .filter(|key| {
                let last = kept
                    .current
                    .remove(key)
                    .or_else(|| kept.previous.remove(key));
                last.inspect(|last| into(key, last)).is_some()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Revision;

    #[derive(Debug, Clone, PartialEq)]
    struct Thing {
        name: String,
        version: Revision,
    }

    crate::impl_object!(Thing, key: name: String, version: version);

    fn thing(name: &str) -> Arc<Thing> {
        Arc::new(Thing {
            name: name.to_owned(),
            version: Revision::ZERO,
        })
    }

    #[test]
    fn deletions_are_taken_once_and_not_for_a_key_created_again() {
        let departed = Departed::<Thing>::new();
        assert!(
            departed
                .take_where(|_| true, |_| false, |_, _| {})
                .is_empty()
        );
        departed.deleted("a".to_owned(), &thing("a"));
        departed.deleted("b".to_owned(), &thing("b"));
        departed.deleted("c".to_owned(), &thing("c"));
        let created_again = |key: &String| key == "c";
        let mut lasts = Vec::new();
        let taken = departed.take_where(
            |key| key == "a",
            created_again,
            |_, last| lasts.push(last.name.clone()),
        );
        assert_eq!(taken, ["a"]);
        assert_eq!(lasts, ["a"], "handed its last state");
        let again = departed.take_where(|key| key == "a", created_again, |_, _| {});
        assert!(again.is_empty(), "taken once");
        let rest = departed.take_where(|_| true, created_again, |_, _| {});
        assert_eq!(rest, ["b"], "c was created again");
    }

    #[test]
    fn the_oldest_generation_goes_when_the_newest_fills_up() {
        let departed = Departed::<Thing>::new();
        for i in 0..GENERATION * 2 + 1 {
            let name = format!("k{i}");
            departed.deleted(name.clone(), &thing(&name));
        }
        let kept = departed.take_where(|_| true, |_| false, |_, _| {});
        assert_eq!(kept.len(), GENERATION + 1);
        assert!(kept.iter().all(|key| key != "k0"), "the oldest forgotten");
        let newest = format!("k{}", GENERATION * 2);
        assert!(kept.contains(&newest));
    }
}
