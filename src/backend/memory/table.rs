//! The memory backend's engine: objects, the global revision and the bounded
//! history of changes. Synchronous and free of tokio; the public
//! [`MemoryStore`](super::MemoryStore) wraps it in a lock.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;

use foldhash::fast::RandomState;

use crate::client::{self, ClientError, Delete, Update};
use crate::object::{Object, Revision};
use crate::source::{Change, Snapshot, SourceError};

/// What a watch cursor finds next in the history.
#[derive(Debug)]
pub(super) enum Next<O: Object> {
    /// The change after the cursor.
    Change(Change<O>),
    /// The history no longer reaches back to the cursor.
    Expired(SourceError),
    /// The cursor is at the latest revision.
    UpToDate,
}

/// Objects, the revision and the change history.
///
/// # Invariants
///
/// - `history[i]` is the change of revision `compacted + 1 + i`: every write
///   makes exactly one change and one revision, so the history holds
///   `compacted + 1 ..= revision` with no gap.
/// - `history.len() <= window`.
#[derive(Debug)]
pub(super) struct Table<O: Object> {
    objects: HashMap<O::Key, O, RandomState>,
    history: VecDeque<Change<O>>,
    revision: Revision,
    compacted: Revision,
    window: NonZeroUsize,
    /// Bumped by every bookmark request.
    pub(super) bookmarks: u64,
    /// Lists left to fail on purpose.
    pub(super) failing_lists: u32,
}

impl<O: Object> Table<O> {
    pub(super) fn new(window: NonZeroUsize) -> Self {
        Self {
            objects: HashMap::default(),
            history: VecDeque::new(),
            revision: Revision::ZERO,
            compacted: Revision::ZERO,
            window,
            bookmarks: 0,
            failing_lists: 0,
        }
    }

    pub(super) fn revision(&self) -> Revision {
        self.revision
    }

    pub(super) fn compacted(&self) -> Revision {
        self.compacted
    }

    pub(super) fn len(&self) -> usize {
        self.objects.len()
    }

    pub(super) fn get(&self, key: &O::Key) -> Option<&O> {
        self.objects.get(key)
    }

    pub(super) fn snapshot(&self) -> Snapshot<O> {
        Snapshot {
            objects: self.objects.values().cloned().collect(),
            revision: self.revision,
        }
    }

    pub(super) fn create(&mut self, mut object: O) -> Result<O, ClientError> {
        let key = object.key();
        if self.objects.contains_key(&key) {
            return Err(ClientError::already_exists(&key));
        }
        object.set_generation(1);
        client::created(&mut object);
        Ok(self.store(key, object))
    }

    pub(super) fn update(&mut self, mut object: O) -> Result<O, ClientError> {
        let key = object.key();
        let Some(current) = self.objects.get(&key) else {
            return Err(ClientError::not_found(&key));
        };
        if current.version() != object.version() {
            return Err(ClientError::conflict(
                &key,
                object.version(),
                current.version(),
            ));
        }
        carry_generation(&mut object, current);
        match client::updated(current, object)? {
            Update::Cache(object) => Ok(self.store(key, object)),
            Update::Remove(mut object) => {
                object.set_version(self.remove(key));
                Ok(object)
            }
        }
    }

    pub(super) fn put(&mut self, mut object: O) -> O {
        let key = object.key();
        match self.objects.get(&key) {
            Some(current) => {
                carry_generation(&mut object, current);
                client::keep_mark(current, &mut object);
            }
            None => {
                object.set_generation(1);
                client::created(&mut object);
            }
        }
        self.store(key, object)
    }

    pub(super) fn delete(
        &mut self,
        key: &O::Key,
        version: Option<Revision>,
    ) -> Result<Revision, ClientError> {
        let Some(current) = self.objects.get(key) else {
            return Err(ClientError::not_found(key));
        };
        let actual = current.version();
        if let Some(expected) = version.filter(|v| *v != actual) {
            return Err(ClientError::conflict(key, expected, actual));
        }
        match client::deleted(current) {
            Delete::Remove => Ok(self.remove(key.clone())),
            Delete::Mark(marked) => Ok(self.store(key.clone(), marked).version()),
            Delete::Marked => Ok(actual),
        }
    }

    /// Removes the object under `key`; returns the revision of the delete.
    fn remove(&mut self, key: O::Key) -> Revision {
        self.objects.remove(&key);
        let revision = self.bump();
        self.record(Change::Deleted { key, revision });
        revision
    }

    /// Forgets the history up to `revision` (clamped to the current one).
    pub(super) fn compact_to(&mut self, revision: Revision) {
        let target = revision.min(self.revision);
        while self.compacted < target {
            self.history.pop_front();
            self.compacted = self.compacted.next();
        }
    }

    /// The change after `cursor`, if any.
    pub(super) fn next_after(&self, cursor: Revision) -> Next<O> {
        if cursor < self.compacted {
            return Next::Expired(SourceError::Expired {
                requested: cursor,
                compacted: self.compacted,
            });
        }
        if cursor >= self.revision {
            return Next::UpToDate;
        }
        let index = usize::try_from(cursor.get() - self.compacted.get()).unwrap_or(usize::MAX);
        match self.history.get(index) {
            Some(change) => Next::Change(change.clone()),
            None => Next::UpToDate,
        }
    }

    fn store(&mut self, key: O::Key, mut object: O) -> O {
        let revision = self.bump();
        object.set_version(revision);
        self.record(Change::Applied(object.clone()));
        self.objects.insert(key, object.clone());
        object
    }

    fn bump(&mut self) -> Revision {
        self.revision = self.revision.next();
        self.revision
    }

    fn record(&mut self, change: Change<O>) {
        self.history.push_back(change);
        if self.history.len() > self.window.get() {
            self.history.pop_front();
            self.compacted = self.compacted.next();
        }
    }
}

/// Keeps `current`'s generation, bumped when the spec changed.
fn carry_generation<O: Object>(object: &mut O, current: &O) {
    if let Some(generation) = current.generation() {
        let bump = u64::from(object.spec_changed(current));
        object.set_generation(generation + bump);
    }
}
