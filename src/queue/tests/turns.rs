//! The model's key groups: which group each level serves next. A group with
//! keys at a level has a turn there; the lowest turn goes first, then takes
//! a turn after every other (or leaves, if it has no more keys there). A
//! group arriving at a level goes last, one handed a key back goes first.

use std::collections::HashMap;

use super::model::Ready;
use crate::queue::Priority;

#[derive(Default)]
pub(super) struct Turns {
    /// The group function; `None`: every key in one group, as in a plain
    /// level.
    pub(super) group: Option<fn(u8) -> u8>,
    turns: HashMap<(Priority, u8), i64>,
    back: i64,
    front: i64,
}

impl Turns {
    pub(super) fn new(group: Option<fn(u8) -> u8>) -> Self {
        Self {
            group,
            ..Self::default()
        }
    }

    pub(super) fn group(&self, key: u8) -> u8 {
        self.group.map_or(0, |group| group(key))
    }

    /// Whether `key`'s group has a key other than `key` ready at `priority`.
    fn others(&self, ready: &[Ready], key: u8, priority: Priority) -> bool {
        let group = self.group(key);
        ready
            .iter()
            .any(|e| e.key != key && e.priority == priority && self.group(e.key) == group)
    }

    /// `key` became ready at `priority`, last in its group.
    pub(super) fn arrived(&mut self, ready: &[Ready], key: u8, priority: Priority) {
        if !self.others(ready, key, priority) {
            self.back += 1;
            self.turns.insert((priority, self.group(key)), self.back);
        }
    }

    /// `key` was handed back to `priority`: its group goes first.
    pub(super) fn restored(&mut self, key: u8, priority: Priority) {
        self.front -= 1;
        self.turns.insert((priority, self.group(key)), self.front);
    }

    /// `key` left `priority` (`served`: handed out, its group's turn used).
    pub(super) fn left(&mut self, ready: &[Ready], key: u8, priority: Priority, served: bool) {
        let at = (priority, self.group(key));
        if !self.others(ready, key, priority) {
            self.turns.remove(&at);
        } else if served {
            self.back += 1;
            self.turns.insert(at, self.back);
        }
    }

    /// Per level with keys, highest first: the entry it serves next (the
    /// first of the group whose turn it is) with its index in `ready`.
    pub(super) fn fronts<'a>(&self, ready: &'a [Ready]) -> Vec<(usize, &'a Ready)> {
        let mut fronts: Vec<(usize, &Ready)> = Vec::new();
        for (i, entry) in ready.iter().enumerate() {
            let rank = |e: &Ready| (self.turns[&(e.priority, self.group(e.key))], e.order);
            match fronts
                .iter_mut()
                .find(|(_, f)| f.priority == entry.priority)
            {
                Some(front) if rank(entry) < rank(front.1) => *front = (i, entry),
                Some(_) => {}
                None => fronts.push((i, entry)),
            }
        }
        fronts.sort_by_key(|(_, f)| std::cmp::Reverse(f.priority));
        fronts
    }

    /// Groups with keys ready at `priority`.
    pub(super) fn active(&self, priority: Priority) -> usize {
        self.turns.keys().filter(|(p, _)| *p == priority).count()
    }

    /// Keys ahead of `entry` in its group at its level.
    pub(super) fn ahead(&self, ready: &[Ready], entry: &Ready) -> usize {
        let group = self.group(entry.key);
        ready
            .iter()
            .filter(|e| {
                e.priority == entry.priority && self.group(e.key) == group && e.order < entry.order
            })
            .count()
    }

    pub(super) fn clear(&mut self) {
        self.turns.clear();
    }
}
