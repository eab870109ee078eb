//! Ready keys by priority, highest level first: one FIFO per level, or,
//! with a group function, one fair round of FIFOs per level (`groups.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use super::Priority;
use super::groups::Groups;
use super::shrink;
use super::stamp::Stamp;

/// A ready key as queued: `seq` tells a live entry from a stale one.
pub(super) struct ReadyEntry<K> {
    pub(super) seq: u64,
    pub(super) since: Stamp,
    pub(super) key: K,
}

/// A key's group, hashed (see `WorkQueueBuilder::group_by`).
pub(crate) type GroupFn<K> = Arc<dyn Fn(&K) -> u64 + Send + Sync>;

/// The levels, sorted by descending priority. Levels are kept when they
/// empty, so a steady workload allocates nothing; there are at most as many
/// as distinct priorities ever used (256). Without a group function each
/// level is one FIFO; with one, each is served fairly across groups.
pub(super) struct Levels<K> {
    levels: Vec<(Priority, Level<K>)>,
    group: Option<GroupFn<K>>,
}

enum Level<K> {
    Plain(VecDeque<ReadyEntry<K>>),
    Fair(Groups<K>),
}

impl<K> Levels<K> {
    pub(super) fn new(group: Option<GroupFn<K>>) -> Self {
        Self {
            levels: Vec::new(),
            group,
        }
    }

    /// `key`'s group (0 for all without a group function).
    pub(super) fn group_of(&self, key: &K) -> u64 {
        self.group.as_ref().map_or(0, |group| group(key))
    }

    pub(super) fn push(&mut self, priority: Priority, group: u64, entry: ReadyEntry<K>) {
        let at = self.level(priority);
        match &mut self.levels[at].1 {
            Level::Plain(entries) => entries.push_back(entry),
            Level::Fair(groups) => groups.push_back(group, entry),
        }
    }

    /// Puts `entry` first in its level (a key handed back, not started).
    pub(super) fn push_front(&mut self, priority: Priority, group: u64, entry: ReadyEntry<K>) {
        let at = self.level(priority);
        match &mut self.levels[at].1 {
            Level::Plain(entries) => entries.push_front(entry),
            Level::Fair(groups) => groups.push_front(group, entry),
        }
    }

    /// An entry of `group` at `priority` went stale; returns how many stale
    /// entries were dropped on the way (see `Groups::mark_stale`).
    pub(super) fn mark_stale(&mut self, priority: Priority, group: u64) -> usize {
        match self.levels.iter_mut().find(|(p, _)| *p == priority) {
            Some((_, Level::Fair(groups))) => groups.mark_stale(group),
            _ => 0,
        }
    }

    /// The index of `priority`'s level, made if missing.
    fn level(&mut self, priority: Priority) -> usize {
        let at = match self.levels.iter().position(|(p, _)| *p <= priority) {
            Some(at) if self.levels[at].0 == priority => return at,
            Some(at) => at,
            None => self.levels.len(),
        };
        let level = match self.group {
            Some(_) => Level::Fair(Groups::new()),
            None => Level::Plain(VecDeque::new()),
        };
        self.levels.insert(at, (priority, level));
        at
    }

    /// The non-empty levels, highest first, with the entry each serves next.
    pub(super) fn fronts(&self) -> impl Iterator<Item = (usize, &ReadyEntry<K>)> {
        self.levels
            .iter()
            .enumerate()
            .filter_map(|(at, (_, level))| level.front().map(|e| (at, e)))
    }

    /// Pops level `at`'s next entry, live or stale; for a live one the
    /// caller then calls `served`, so that a stale entry never uses a
    /// group's turn.
    pub(super) fn pop(&mut self, at: usize) -> Option<ReadyEntry<K>> {
        match &mut self.levels.get_mut(at)?.1 {
            Level::Plain(entries) => {
                let entry = entries.pop_front();
                if shrink::is_sparse(entries.len(), entries.capacity()) {
                    entries.shrink_to(shrink::target(entries.len()));
                }
                entry
            }
            Level::Fair(groups) => groups.pop_front(),
        }
    }

    /// The entry level `at` just gave was live (see `Groups::served`);
    /// returns how many stale entries were dropped.
    pub(super) fn served(&mut self, at: usize) -> usize {
        match self.levels.get_mut(at) {
            Some((_, Level::Fair(groups))) => groups.served(),
            _ => 0,
        }
    }

    /// Memory held for entries, live or stale.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn capacity(&self) -> usize {
        self.levels.iter().map(|(_, level)| level.capacity()).sum()
    }

    /// Pops the stale entries each level would serve next (`stale` tells);
    /// returns how many.
    pub(super) fn drop_stale_fronts(
        &mut self,
        mut stale: impl FnMut(&ReadyEntry<K>) -> bool,
    ) -> usize {
        let mut dropped = 0;
        for (_, level) in &mut self.levels {
            match level {
                Level::Plain(entries) => {
                    while entries.front().is_some_and(&mut stale) {
                        entries.pop_front();
                        dropped += 1;
                    }
                }
                Level::Fair(groups) => dropped += groups.drop_stale_front(&mut stale),
            }
        }
        dropped
    }

    /// Keeps only the entries for which `live` holds.
    pub(super) fn retain(&mut self, mut live: impl FnMut(&ReadyEntry<K>) -> bool) {
        for (_, level) in &mut self.levels {
            match level {
                Level::Plain(entries) => entries.retain(&mut live),
                Level::Fair(groups) => groups.retain(&mut live),
            }
        }
    }

    /// Live ready keys of `group`, over all levels.
    pub(super) fn ready_in_group(&self, group: u64) -> usize {
        let live = |(_, level): &(Priority, Level<K>)| match level {
            Level::Plain(_) => 0,
            Level::Fair(groups) => groups.live_in(group),
        };
        self.levels.iter().map(live).sum()
    }

    pub(super) fn clear(&mut self) {
        self.levels.clear();
    }

    /// Entries, live or stale.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn entries(&self) -> usize {
        self.levels.iter().map(|(_, level)| level.entries()).sum()
    }
}

impl<K> Level<K> {
    fn front(&self) -> Option<&ReadyEntry<K>> {
        match self {
            Level::Plain(entries) => entries.front(),
            Level::Fair(groups) => groups.front(),
        }
    }

    #[cfg(all(test, not(tend_loom)))]
    fn capacity(&self) -> usize {
        match self {
            Level::Plain(entries) => entries.capacity(),
            Level::Fair(groups) => groups.capacity(),
        }
    }

    #[cfg(all(test, not(tend_loom)))]
    fn entries(&self) -> usize {
        match self {
            Level::Plain(entries) => entries.len(),
            Level::Fair(groups) => groups.entries(),
        }
    }
}
