//! One ready level served fairly across key groups: a FIFO per group, and
//! the groups with ready keys taken in turn (round-robin), one key a turn.
//!
//! Entries go stale as in a plain level (see `lanes.rs`); each group counts
//! its live ones (`mark_stale` when one goes stale), so that a group holding
//! only stale entries is no longer a turn, and a stale entry never uses one.
//!
//! The groups live in a slab, found by their hash only when a key is queued:
//! serving a key touches no hash table. The turns are a ring of
//! `(turn, slot)` stamps: a group moves by getting a new stamp (pushed at
//! either end), which makes its old ring entry stale, to be skipped when it
//! reaches the front; a freed slot's stamp is 0, never a turn's. The front is
//! kept valid after every change, so reading it needs no `&mut`.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use foldhash::fast::{FixedState, RandomState};

use super::levels::{GroupFn, ReadyEntry};
use super::shrink;

/// The hash a group is known by: fixed, so that `WorkQueue::ready_in_group`
/// finds the group the builder's function put keys in. Two groups whose
/// hashes collide share their turns.
pub(crate) fn group_hash<G: Hash + ?Sized>(group: &G) -> u64 {
    FixedState::with_seed(0x7465_6e64).hash_one(group)
}

/// `group` as the levels call it: each key's group, hashed. A key whose
/// group function panics goes to the group of the unit value `()`, so that
/// it is still served (the panic is the user's, printed by the panic hook).
pub(crate) fn group_fn<K, G: Hash>(group: impl Fn(&K) -> G + Send + Sync + 'static) -> GroupFn<K> {
    Arc::new(move |key: &K| {
        std::panic::catch_unwind(AssertUnwindSafe(|| group_hash(&group(key))))
            .unwrap_or_else(|_| group_hash(&()))
    })
}

pub(super) struct Groups<K> {
    /// Each group's slot, by hash.
    index: HashMap<u64, usize, RandomState>,
    slots: Vec<Group<K>>,
    free: Vec<usize>,
    ring: VecDeque<(u64, usize)>,
    next_turn: u64,
}

struct Group<K> {
    hash: u64,
    entries: VecDeque<ReadyEntry<K>>,
    live: usize,
    /// The stamp of this group's one valid ring entry; 0 for a free slot.
    turn: u64,
}

impl<K> Groups<K> {
    pub(super) fn new() -> Self {
        Self {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            ring: VecDeque::new(),
            next_turn: 0,
        }
    }

    /// Queues `entry` last in `group`; a group that had no live key takes
    /// its turn after every other group's.
    pub(super) fn push_back(&mut self, group: u64, entry: ReadyEntry<K>) {
        let at = self.slot(group);
        let g = &mut self.slots[at];
        if g.live == 0 {
            self.next_turn += 1;
            g.turn = self.next_turn;
            self.ring.push_back((g.turn, at));
        }
        g.entries.push_back(entry);
        g.live += 1;
    }

    /// Queues `entry` first in `group`, and the group first in the ring (a
    /// key handed back unstarted gets back the turn it was given).
    pub(super) fn push_front(&mut self, group: u64, entry: ReadyEntry<K>) {
        let at = self.slot(group);
        self.next_turn += 1;
        let g = &mut self.slots[at];
        g.turn = self.next_turn;
        self.ring.push_front((g.turn, at));
        g.entries.push_front(entry);
        g.live += 1;
    }

    /// `group`'s slot, taken if it has none.
    fn slot(&mut self, group: u64) -> usize {
        if let Some(&at) = self.index.get(&group) {
            return at;
        }
        let fresh = Group {
            hash: group,
            ..Group::free()
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at] = fresh;
                at
            }
            None => {
                self.slots.push(fresh);
                self.slots.len() - 1
            }
        };
        self.index.insert(group, at);
        at
    }

    /// One of `group`'s entries went stale; returns how many stale entries
    /// were dropped with a group left with no live key at the front.
    pub(super) fn mark_stale(&mut self, group: u64) -> usize {
        if let Some(&at) = self.index.get(&group) {
            let g = &mut self.slots[at];
            g.live = g.live.saturating_sub(1);
        }
        self.settle_front()
    }

    /// The group whose turn it is (valid, with a live key), if any.
    fn head(&self) -> Option<&Group<K>> {
        let &(_, at) = self.ring.front()?;
        self.slots.get(at)
    }

    /// The entry the next turn starts from (live or stale).
    pub(super) fn front(&self) -> Option<&ReadyEntry<K>> {
        self.head()?.entries.front()
    }

    /// Pops the stale entries before the next turn's live one; returns how
    /// many.
    pub(super) fn drop_stale_front(
        &mut self,
        mut stale: impl FnMut(&ReadyEntry<K>) -> bool,
    ) -> usize {
        let Some(&(_, at)) = self.ring.front() else {
            return 0;
        };
        let entries = &mut self.slots[at].entries;
        let mut dropped = 0;
        while entries.front().is_some_and(&mut stale) {
            entries.pop_front();
            dropped += 1;
        }
        dropped
    }

    /// Pops the entry the next turn starts from (live or stale: the caller
    /// tells, and calls `served` for a live one). A group emptied of stale
    /// entries leaves the ring.
    pub(super) fn pop_front(&mut self) -> Option<ReadyEntry<K>> {
        loop {
            let &(turn, at) = self.ring.front()?;
            if self.slots[at].turn == turn {
                if let Some(entry) = self.slots[at].entries.pop_front() {
                    return Some(entry);
                }
                self.release(at);
            }
            self.ring.pop_front();
        }
    }

    /// The entry just popped was live: its group's turn is used, and the
    /// group goes last if it has more. Returns how many stale entries were
    /// dropped on the way.
    pub(super) fn served(&mut self) -> usize {
        let Some((_, at)) = self.ring.pop_front() else {
            return 0;
        };
        let mut dropped = 0;
        let g = &mut self.slots[at];
        g.live = g.live.saturating_sub(1);
        if g.live > 0 && !g.entries.is_empty() {
            shrink_if_sparse(&mut g.entries);
            self.next_turn += 1;
            g.turn = self.next_turn;
            self.ring.push_back((g.turn, at));
        } else {
            dropped += self.release(at);
        }
        let dropped = dropped + self.settle_front();
        // Serving in turn reads each group's FIFO in turn, which the
        // hardware prefetcher does not follow as it does one FIFO: loading
        // the next turn's entry now overlaps that miss with the caller's
        // work rather than the next hand-out's, under the lock.
        std::hint::black_box(self.front().map(|e| e.seq));
        dropped
    }

    /// Frees slot `at`; returns how many (stale) entries it still held.
    fn release(&mut self, at: usize) -> usize {
        let g = std::mem::replace(&mut self.slots[at], Group::free());
        self.index.remove(&g.hash);
        self.free.push(at);
        g.entries.len()
    }

    /// Keeps only the entries for which `live` holds.
    pub(super) fn retain(&mut self, mut live: impl FnMut(&ReadyEntry<K>) -> bool) {
        for at in 0..self.slots.len() {
            let g = &mut self.slots[at];
            if g.turn == 0 {
                continue;
            }
            g.entries.retain(&mut live);
            g.live = g.entries.len();
            if g.live == 0 {
                self.release(at);
            }
        }
        let slots = &self.slots;
        self.ring
            .retain(|&(turn, at)| turn != 0 && slots[at].turn == turn);
        self.shrink();
    }

    /// Ready entries of `group`, live ones only.
    pub(super) fn live_in(&self, group: u64) -> usize {
        self.index.get(&group).map_or(0, |&at| self.slots[at].live)
    }

    /// Memory held for entries (live or stale), groups and turns, in
    /// entries.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn capacity(&self) -> usize {
        let entries: usize = self.slots.iter().map(|g| g.entries.capacity()).sum();
        entries + self.slots.capacity() + self.index.capacity() + self.ring.capacity()
    }

    /// Entries, live or stale.
    #[cfg(all(test, not(tend_loom)))]
    pub(super) fn entries(&self) -> usize {
        self.slots.iter().map(|g| g.entries.len()).sum()
    }

    /// Drops ring entries from the front until it is a group with a live
    /// key (a moved group's old entry, a group left with stale entries
    /// only); returns how many stale entries went with them.
    fn settle_front(&mut self) -> usize {
        let mut dropped = 0;
        while let Some(&(turn, at)) = self.ring.front() {
            let g = &self.slots[at];
            if g.turn == turn && g.live > 0 {
                break;
            }
            if g.turn == turn {
                dropped += self.release(at);
            }
            self.ring.pop_front();
        }
        self.shrink();
        dropped
    }

    /// Gives memory back once groups are few: the groups move to a slab
    /// of their own size, in ring order, and the free slots are forgotten.
    fn shrink(&mut self) {
        shrink_if_sparse(&mut self.ring);
        if shrink::is_sparse(self.index.len(), self.index.capacity()) {
            self.index.shrink_to(shrink::target(self.index.len()));
        }
        if !shrink::is_sparse(self.index.len(), self.slots.capacity()) {
            return;
        }
        let mut slots = Vec::with_capacity(shrink::target(self.index.len()));
        let mut ring = VecDeque::with_capacity(self.index.len());
        for &(turn, at) in &self.ring {
            if turn == 0 || self.slots[at].turn != turn {
                continue;
            }
            let g = std::mem::replace(&mut self.slots[at], Group::free());
            ring.push_back((turn, slots.len()));
            self.index.insert(g.hash, slots.len());
            slots.push(g);
        }
        (self.slots, self.ring) = (slots, ring);
        self.free = Vec::new();
    }
}

impl<K> Group<K> {
    fn free() -> Self {
        Self {
            hash: 0,
            entries: VecDeque::new(),
            live: 0,
            turn: 0,
        }
    }
}

fn shrink_if_sparse<T>(entries: &mut VecDeque<T>) {
    if shrink::is_sparse(entries.len(), entries.capacity()) {
        entries.shrink_to(shrink::target(entries.len()));
    }
}
