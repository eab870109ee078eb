//! The directory source's memory: what each file held when last read, the
//! objects, the revision counter and a bounded history of changes.
//!
//! A directory has no history of its own, so the table makes one: every
//! difference a scan finds becomes a [`Change`] with the next revision,
//! kept in a ring of [`HISTORY`] changes that watch streams read from.
//! Synchronous plain data; the source holds it behind one mutex.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::FileError;
use crate::object::{Object, Revision};
use crate::source::{Change, Snapshot, SourceError};

/// Changes kept for watchers; one further behind gets
/// [`SourceError::Expired`] and lists again.
pub(super) const HISTORY: usize = 8192;

/// Changes a watch stream takes per lock.
const READ_BATCH: usize = 256;

/// A file's content, summarised: its length and a hash (random per process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    pub(super) len: u64,
    pub(super) hash: u64,
}

/// What a scan found at a path.
pub(super) enum Found<O> {
    /// No file (deleted, renamed away, or not a file any more).
    Gone,
    /// A file with this content, decoded (or not).
    File {
        fingerprint: Fingerprint,
        decoded: Result<O, FileError>,
    },
}

/// What the table knows about one file.
struct FileState<K> {
    fingerprint: Fingerprint,
    /// The key of the object this file provides: its last good content's,
    /// kept while the file is malformed.
    key: Option<K>,
    /// Why the current content was rejected.
    error: Option<Arc<FileError>>,
    /// Rejected because another file holds this key: read again when it
    /// is released.
    blocked_on: Option<K>,
}

/// An object and the file it came from.
struct Entry<O> {
    path: PathBuf,
    object: O,
}

/// Counters a scan updates; see [`DirStats`](super::DirStats).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    pub(super) decode_errors: u64,
    pub(super) full_scans: u64,
}

pub(super) struct Table<O: Object> {
    revision: Revision,
    files: BTreeMap<PathBuf, FileState<O::Key>>,
    objects: HashMap<O::Key, Entry<O>>,
    /// Every change after `compacted`, in order: entry `i` has revision
    /// `compacted + 1 + i`.
    history: VecDeque<Change<O>>,
    compacted: Revision,
    pub(super) counters: Counters,
}

impl<O: Object> Table<O> {
    pub(super) fn new() -> Self {
        Self {
            revision: Revision::ZERO,
            files: BTreeMap::new(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            compacted: Revision::ZERO,
            counters: Counters::default(),
        }
    }

    /// Whether `path` last held exactly this content, with nothing to retry.
    pub(super) fn unchanged(&self, path: &Path, fingerprint: Fingerprint) -> bool {
        self.files
            .get(path)
            .is_some_and(|file| file.fingerprint == fingerprint && file.blocked_on.is_none())
    }

    /// The known files at or under `prefix` (every file for an empty one).
    pub(super) fn known_under(&self, prefix: &Path) -> Vec<PathBuf> {
        self.files
            .range::<Path, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map(|(path, _)| path)
            .take_while(|path| path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Applies what a scan found, numbering each difference. Returns the
    /// files to read again: those rejected for a key that is now free.
    pub(super) fn apply(&mut self, found: Vec<(PathBuf, Found<O>)>) -> Vec<PathBuf> {
        let mut released = Vec::new();
        for (path, found) in found {
            match found {
                Found::Gone => self.forget(&path, &mut released),
                Found::File {
                    fingerprint,
                    decoded: Ok(object),
                } => self.store(path, fingerprint, object, &mut released),
                Found::File {
                    fingerprint,
                    decoded: Err(error),
                } => self.reject(path, fingerprint, error, None),
            }
        }
        if released.is_empty() {
            return Vec::new();
        }
        self.files
            .iter()
            .filter(|(_, file)| {
                file.blocked_on
                    .as_ref()
                    .is_some_and(|k| released.contains(k))
            })
            .map(|(path, _)| path.clone())
            .collect()
    }

    fn forget(&mut self, path: &Path, released: &mut Vec<O::Key>) {
        let Some(file) = self.files.remove(path) else {
            return;
        };
        if let Some(key) = file.key {
            self.delete(key, released);
        }
    }

    fn delete(&mut self, key: O::Key, released: &mut Vec<O::Key>) {
        if self.objects.remove(&key).is_some() {
            let revision = self.bump();
            self.record(Change::Deleted {
                key: key.clone(),
                revision,
            });
            released.push(key);
        }
    }

    fn store(
        &mut self,
        path: PathBuf,
        fingerprint: Fingerprint,
        mut object: O,
        released: &mut Vec<O::Key>,
    ) {
        let key = object.key();
        if let Some(holder) = self.objects.get(&key).filter(|entry| entry.path != path) {
            let error = FileError::DuplicateKey {
                path: path.clone(),
                key: format!("{key:?}"),
                holder: holder.path.clone(),
            };
            return self.reject(path, fingerprint, error, Some(key));
        }
        let previous = self.files.get(&path).and_then(|file| file.key.clone());
        if let Some(previous) = previous.filter(|previous| *previous != key) {
            self.delete(previous, released);
        }
        let old = self.objects.get(&key).map(|entry| &entry.object);
        if object.generation().is_some() {
            let generation = match old {
                Some(old) => old.generation().unwrap_or(0) + u64::from(object.spec_changed(old)),
                None => 1,
            };
            object.set_generation(generation);
        }
        let revision = self.bump();
        object.set_version(revision);
        self.record(Change::Applied(object.clone()));
        let file = FileState {
            fingerprint,
            key: Some(key.clone()),
            error: None,
            blocked_on: None,
        };
        self.files.insert(path.clone(), file);
        self.objects.insert(key, Entry { path, object });
    }

    /// Keeps the file's last good object (if any) and remembers the error.
    fn reject(
        &mut self,
        path: PathBuf,
        fingerprint: Fingerprint,
        error: FileError,
        blocked_on: Option<O::Key>,
    ) {
        self.counters.decode_errors += 1;
        tracing::warn!(error = %crate::error::error_chain(&error), "file rejected; keeping its last good state");
        let key = self.files.get(&path).and_then(|file| file.key.clone());
        let file = FileState {
            fingerprint,
            key,
            error: Some(Arc::new(error)),
            blocked_on,
        };
        self.files.insert(path, file);
    }

    fn bump(&mut self) -> Revision {
        self.revision = self.revision.next();
        self.revision
    }

    fn record(&mut self, change: Change<O>) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
            self.compacted = self.compacted.next();
        }
        self.history.push_back(change);
    }

    /// Up to a batch of changes after `cursor`, in order.
    pub(super) fn changes_after(&self, cursor: Revision) -> Result<Vec<Change<O>>, SourceError> {
        self.check_watchable(cursor)?;
        let skip = usize::try_from(cursor.get() - self.compacted.get()).unwrap_or(usize::MAX);
        Ok(self
            .history
            .iter()
            .skip(skip)
            .take(READ_BATCH)
            .cloned()
            .collect())
    }

    /// Fails unless a watch from `from` can be served.
    /// (A revision this table never reached is as unknown as a forgotten one:
    /// another process's, or before a restart.)
    pub(super) fn check_watchable(&self, from: Revision) -> Result<(), SourceError> {
        if from < self.compacted || from > self.revision {
            return Err(SourceError::expired(from, self.compacted));
        }
        Ok(())
    }

    pub(super) fn snapshot(&self) -> Snapshot<O> {
        Snapshot {
            objects: self
                .objects
                .values()
                .map(|entry| entry.object.clone())
                .collect(),
            revision: self.revision,
        }
    }

    pub(super) fn revision(&self) -> Revision {
        self.revision
    }

    pub(super) fn files(&self) -> usize {
        self.files.len()
    }

    pub(super) fn objects(&self) -> usize {
        self.objects.len()
    }

    /// The files whose current content is rejected.
    pub(super) fn malformed(&self) -> Vec<Arc<FileError>> {
        self.files
            .values()
            .filter_map(|file| file.error.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug)]
    struct Item {
        name: String,
        version: Revision,
    }
    crate::impl_object!(Item, key: name: String, version: version);

    fn file(name: &str, hash: u64) -> (PathBuf, Found<Item>) {
        let item = Item {
            name: name.to_owned(),
            version: Revision::ZERO,
        };
        let fingerprint = Fingerprint { len: 1, hash };
        let found = Found::File {
            fingerprint,
            decoded: Ok(item),
        };
        (PathBuf::from(format!("{name}.json")), found)
    }

    #[test]
    fn a_cursor_older_than_the_history_expires_and_a_recent_one_reads_in_order() {
        let mut table = Table::<Item>::new();
        for n in 0..HISTORY as u64 + 10 {
            table.apply(vec![file("a", n)]);
        }
        let last = table.revision();
        assert_eq!(last.get(), HISTORY as u64 + 10);
        assert!(
            table
                .changes_after(Revision::new(9))
                .unwrap_err()
                .is_expired()
        );
        let recent = table.changes_after(Revision::new(last.get() - 3)).unwrap();
        let revisions: Vec<u64> = recent.iter().map(|c| c.revision().get()).collect();
        assert_eq!(revisions, [last.get() - 2, last.get() - 1, last.get()]);
        assert!(table.changes_after(last.next()).unwrap_err().is_expired());
    }

    #[test]
    fn a_file_whose_key_changes_deletes_the_old_key() {
        let mut table = Table::<Item>::new();
        let (path, found) = file("a", 1);
        table.apply(vec![(path.clone(), found)]);
        let (_, renamed) = file("b", 2);
        table.apply(vec![(path, renamed)]);
        let changes = table.changes_after(Revision::ZERO).unwrap();
        assert!(matches!(&changes[1], Change::Deleted { key, .. } if key == "a"));
        assert!(matches!(&changes[2], Change::Applied(item) if item.name == "b"));
        assert_eq!(table.objects(), 1);
    }
}
