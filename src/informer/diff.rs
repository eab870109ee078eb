//! `Diff`: what a relist changes, as events: the cache's state against
//! the listed objects.

use std::sync::Arc;

use super::Event;
use super::dispatch::Keyed;
use crate::object::Object;

/// The differences a relist finds between the cache and the listed objects.
pub(super) struct Diff<O: Object> {
    pub(super) events: Vec<Keyed<O>>,
    pub(super) stale: u64,
    pub(super) initial: bool,
    pub(super) with_events: bool,
}

impl<O: Object> Diff<O> {
    /// What to cache for a listed `object` under `key` whose cached state
    /// is `cached`: the cached `Arc` when the version is the same (no event)
    /// or newer (counted as stale), a new `Arc` otherwise (an event).
    pub(super) fn keep(&mut self, key: &O::Key, cached: Option<&Arc<O>>, object: O) -> Arc<O> {
        match cached {
            Some(cached) if cached.version() == object.version() => return Arc::clone(cached),
            Some(cached) if cached.version() > object.version() => {
                self.stale += 1;
                return Arc::clone(cached);
            }
            _ => {}
        }
        let new = Arc::new(object);
        if self.with_events {
            let event = if self.initial {
                Event::Initial(Arc::clone(&new))
            } else {
                Event::Applied {
                    old: cached.cloned(),
                    new: Arc::clone(&new),
                }
            };
            self.events.push((key.clone(), event));
        }
        new
    }

    /// Records a deletion for each of `gone`, the cached objects the list
    /// no longer has (and its scope, if any, keeps: one it does not is
    /// dropped, not deleted), ahead of the other changes: a subscriber that
    /// counts objects (say, per owner) never sees a replacement beside what
    /// it replaced.
    pub(super) fn vanished(&mut self, gone: Vec<(O::Key, Arc<O>)>) {
        if !self.with_events {
            return;
        }
        let gone = gone.into_iter();
        let mut events: Vec<Keyed<O>> = gone
            .map(|(key, object)| (key, Event::Deleted(object)))
            .collect();
        if !events.is_empty() {
            events.append(&mut self.events);
            self.events = events;
        }
    }
}
