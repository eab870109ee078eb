//! Ready keys by priority: one FIFO per level, highest level first.

use std::collections::VecDeque;

use super::Priority;
use super::shrink;
use super::stamp::Stamp;

/// A ready key as queued: `seq` tells a live entry from a stale one.
pub(super) struct ReadyEntry<K> {
    pub(super) seq: u64,
    pub(super) since: Stamp,
    pub(super) key: K,
}

/// The FIFOs, sorted by descending priority. Levels are kept when they
/// empty, so a steady workload allocates nothing; there are at most as many
/// as distinct priorities ever used (256).
pub(super) struct Levels<K> {
    levels: Vec<(Priority, VecDeque<ReadyEntry<K>>)>,
}

impl<K> Levels<K> {
    pub(super) fn new() -> Self {
        Self { levels: Vec::new() }
    }

    pub(super) fn push(&mut self, priority: Priority, entry: ReadyEntry<K>) {
        let at = self.level(priority);
        self.levels[at].1.push_back(entry);
    }

    /// Puts `entry` first in its level (a key handed back, not started).
    pub(super) fn push_front(&mut self, priority: Priority, entry: ReadyEntry<K>) {
        let at = self.level(priority);
        self.levels[at].1.push_front(entry);
    }

    /// The index of `priority`'s level, made if missing.
    fn level(&mut self, priority: Priority) -> usize {
        match self.levels.iter().position(|(p, _)| *p <= priority) {
            Some(at) if self.levels[at].0 == priority => at,
            Some(at) => {
                self.levels.insert(at, (priority, VecDeque::new()));
                at
            }
            None => {
                self.levels.push((priority, VecDeque::new()));
                self.levels.len() - 1
            }
        }
    }

    /// The non-empty levels, highest first, with their oldest entry.
    pub(super) fn fronts(&self) -> impl Iterator<Item = (usize, &ReadyEntry<K>)> {
        self.levels
            .iter()
            .enumerate()
            .filter_map(|(at, (_, entries))| entries.front().map(|e| (at, e)))
    }

    pub(super) fn pop(&mut self, at: usize) -> Option<ReadyEntry<K>> {
        let entries = &mut self.levels.get_mut(at)?.1;
        let entry = entries.pop_front();
        if shrink::is_sparse(entries.len(), entries.capacity()) {
            entries.shrink_to(shrink::target(entries.len()));
        }
        entry
    }

    /// Memory held for entries, live or stale.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn capacity(&self) -> usize {
        self.levels.iter().map(|(_, e)| e.capacity()).sum()
    }

    /// Pops the entries at the front of each level for which `stale` holds;
    /// returns how many.
    pub(super) fn drop_stale_fronts(
        &mut self,
        mut stale: impl FnMut(&ReadyEntry<K>) -> bool,
    ) -> usize {
        let mut dropped = 0;
        for (_, entries) in &mut self.levels {
            while entries.front().is_some_and(&mut stale) {
                entries.pop_front();
                dropped += 1;
            }
        }
        dropped
    }

    /// Keeps only the entries for which `live` holds.
    pub(super) fn retain(&mut self, mut live: impl FnMut(&ReadyEntry<K>) -> bool) {
        for (_, entries) in &mut self.levels {
            entries.retain(&mut live);
        }
    }

    pub(super) fn clear(&mut self) {
        self.levels.clear();
    }

    /// Entries, live or stale.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn entries(&self) -> usize {
        self.levels.iter().map(|(_, e)| e.len()).sum()
    }
}
