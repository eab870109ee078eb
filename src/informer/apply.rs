//! The informer's cache writes: a list's snapshot, a watch's changes, the
//! resync, each applied to the cache and delivered to the handlers.

use std::borrow::Cow;
use std::sync::Arc;

use tokio::time::Instant;

use super::Event;
use super::backoff::jittered;
use super::cache::{Applied, Removed, Replaced};
use super::stats::Counters;
use super::watcher::{Listing, Runner};
use crate::object::{Object, Revision};
use crate::source::{Change, Snapshot};

/// How many replaced objects a run of watch events frees after it, not as
/// it goes.
const RETIRED_MAX: usize = 16;

impl<O: Object> Runner<'_, O> {
    /// Before a list of a scoped informer: drops what the scope no longer
    /// keeps, so that the cache holds only shards the list's selector
    /// names; says where the scope is.
    pub(super) fn begin_scoped_list(&mut self) -> Option<Listing> {
        let scoped = self.shared.scope.as_ref()?;
        let narrowed = *scoped.attached.narrowed.borrow();
        self.evict();
        let growth = *scoped.attached.widened.borrow();
        Some(Listing { growth, narrowed })
    }

    /// Applies a list; `false` when the scope shrank while it ran and an
    /// object it lacks that the scope keeps was kept as cached, neither
    /// deleted nor dropped: the cache is neither synced nor filled by it,
    /// and the caller lists again.
    pub(super) fn apply_list(&mut self, snapshot: Snapshot<O>, initial: bool) -> bool {
        let shared = self.shared;
        let count = snapshot.objects.len();
        let mut subscribers = shared.subscribers.lock();
        let with_events = !subscribers.is_empty();
        let scope = shared.scope.as_ref();
        let listing = self.listing.take();
        let shrank = || {
            (scope.zip(listing))
                .is_some_and(|(scoped, at)| *scoped.attached.narrowed.borrow() != at.narrowed)
        };
        // Transformed already, as they were listed.
        let objects = snapshot.objects;
        let scope_of = scope.map(|s| &s.scope);
        let replaced = (shared.store).replace(objects, initial, with_events, scope_of, &shrank);
        let Replaced {
            events,
            stale,
            out_of_scope,
            carried: unsure,
            old,
        } = replaced;
        let events = subscribers.deliver_all(events);
        shared.store.publish(snapshot.revision);
        if !unsure {
            shared.store.mark_synced();
        }
        drop(subscribers);
        if let (Some(listing), false) = (listing, unsure) {
            self.filled(listing.growth);
        }
        Counters::add(&shared.counters.stale_ignored, stale);
        Counters::add(&shared.counters.out_of_scope, out_of_scope);
        let changes = events.len();
        // The old cache and the events are freed outside every lock.
        drop((events, old));
        self.revision = snapshot.revision;
        shared.counters.revision.store(
            snapshot.revision.get(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.tombstones.clear();
        self.listed_timers();
        tracing::info!(objects = count, changes, revision = %snapshot.revision, initial, "listed");
        !unsure
    }

    /// Tells the scope's owner that the cache holds the objects of its
    /// growth `growth`.
    fn filled(&self, growth: u64) {
        let Some(scoped) = &self.shared.scope else {
            return;
        };
        scoped.attached.filled.send_if_modified(|filled| {
            let grew = growth > *filled;
            if grew {
                *filled = growth;
            }
            grew
        });
    }

    /// After a list: the relist timer starts over, the resync's starts if
    /// it has not.
    fn listed_timers(&mut self) {
        let (options, now) = (&self.shared.options, Instant::now());
        self.relist_at = (options.relist)
            .map(|period| crate::time::deadline(now, jittered(period, &mut self.rng)));
        if self.resync_at.is_none() {
            self.resync_at = (options.resync)
                .map(|period| crate::time::deadline(now, jittered(period, &mut self.rng)));
        }
    }

    pub(super) fn apply(&mut self, change: Change<O>) {
        match change {
            Change::Applied(object) => self.apply_object(object),
            Change::Deleted { key, revision } => self.apply_delete(key, revision),
            Change::Bookmark(revision) => self.advance_revision(revision),
        }
    }

    pub(super) fn apply_object(&mut self, object: O) {
        let object = match &self.shared.transform {
            Some(transform) => transform(object),
            None => object,
        };
        self.advance_revision(object.version());
        let new = Arc::new(object);
        // The key is computed once here and goes with the event: handlers
        // do not call `Object::key` (user code) again. Borrowed when the
        // object holds it: no copy per change.
        match new.key_ref() {
            Some(key) => self.store(Cow::Borrowed(key), &new),
            None => self.store(Cow::Owned(new.key()), &new),
        }
    }

    /// Caches `new` under `key` unless out of scope or stale, and delivers
    /// the change.
    fn store(&mut self, key: Cow<'_, O::Key>, new: &Arc<O>) {
        let shared = self.shared;
        if (shared.scope.as_ref()).is_some_and(|scoped| !scoped.scope.keeps(&key)) {
            Counters::bump(&shared.counters.out_of_scope);
            return;
        }
        if self.tombstones.covers(&key, new.version()) {
            Counters::bump(&shared.counters.stale_ignored);
            return;
        }
        self.tombstones.forget(&key);
        let mut subscribers = shared.subscribers.lock();
        match shared.store.apply(&key, Arc::clone(new)) {
            Applied::Stale => {
                drop(subscribers);
                Counters::bump(&shared.counters.stale_ignored);
            }
            Applied::Stored(old) => {
                let event = Event::Applied {
                    old,
                    new: Arc::clone(new),
                };
                match key {
                    Cow::Borrowed(key) => subscribers.deliver(key, &event),
                    Cow::Owned(key) => subscribers.deliver_owned(key, &event),
                }
                drop(subscribers);
                Counters::bump(&shared.counters.events_applied);
                if let Event::Applied { old: Some(old), .. } = event {
                    self.retire(old);
                }
            }
        }
    }

    /// Keeps `old`, replaced, to be freed after the run (only the first
    /// few: they are what a reconcile the run wakes would wait for; the
    /// rest are freed now, so a burst holds no more memory than before).
    fn retire(&mut self, old: Arc<O>) {
        if self.retired.len() < RETIRED_MAX {
            self.retired.push(old);
        }
    }

    pub(super) fn apply_delete(&mut self, key: O::Key, revision: Revision) {
        let shared = self.shared;
        self.advance_revision(revision);
        let mut subscribers = shared.subscribers.lock();
        match shared.store.remove(&key, revision) {
            Removed::Gone(old) => {
                let event = Event::Deleted(old);
                subscribers.deliver(&key, &event);
                drop(subscribers);
                Counters::bump(&shared.counters.events_applied);
            }
            Removed::Stale => {
                drop(subscribers);
                Counters::bump(&shared.counters.stale_ignored);
                return;
            }
            Removed::Absent => {
                drop(subscribers);
                if self.tombstones.covers(&key, revision) {
                    Counters::bump(&shared.counters.stale_ignored);
                    return;
                }
            }
        }
        self.tombstones.insert(key, revision);
    }

    /// Drops what the scope no longer keeps, with no event.
    pub(super) fn evict(&mut self) {
        let Some(scoped) = &self.shared.scope else {
            return;
        };
        let subscribers = self.shared.subscribers.lock();
        let evicted = self.shared.store.evict(&scoped.scope);
        drop(subscribers);
        tracing::debug!(
            objects = evicted.len(),
            "dropped what the scope no longer keeps"
        );
        // Freed outside every lock.
        drop(evicted);
    }

    pub(super) fn advance_revision(&mut self, revision: Revision) {
        if revision > self.revision {
            self.revision = revision;
            self.shared
                .counters
                .revision
                .store(revision.get(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(super) fn resync(&mut self) {
        let shared = self.shared;
        let mut subscribers = shared.subscribers.lock();
        Counters::bump(&shared.counters.resyncs);
        if subscribers.is_empty() {
            return;
        }
        let events: Vec<_> = shared
            .store
            .snapshot()
            .into_iter()
            .map(|(key, object)| (key, Event::Resync(object)))
            .collect();
        tracing::debug!(objects = events.len(), "resync");
        let spent = subscribers.deliver_all(events);
        drop(subscribers);
        drop(spent);
    }
}
