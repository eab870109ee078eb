//! The record of reads against a model, on random sequences of reconciles
//! (each reading a random set, ending committed, cancelled or gone), object
//! changes and forgotten keys: every change wakes exactly the keys whose
//! last reconcile (or running one) read something it touched.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::record::{Dep, MAX_READS, Record, Why};
use crate::informer::{Filter, IndexValue};
use crate::object::Revision;

#[derive(Debug, Clone, PartialEq)]
struct Item {
    name: String,
    group: u8,
    /// Filed under each of its tags (index 1): several values, or none.
    tags: u8,
    weight: u8,
    version: Revision,
}

crate::impl_object!(Item, key: name: String, version: version);

/// The values index `index` files `item` under.
fn values(index: usize, item: &Item) -> Vec<IndexValue> {
    match index {
        0 => vec![item.group.to_string()],
        _ => (0..3u8)
            .filter(|bit| item.tags & (1 << bit) != 0)
            .map(|bit| bit.to_string())
            .collect(),
    }
}

/// The filters reads may use (compared by identity: made once).
fn filters() -> [Filter<Item>; 2] {
    [
        Filter::new("heavy", |item: &Item| item.weight > 1),
        Filter::new("group 0", |item: &Item| item.group == 0),
    ]
}

/// A read as the model keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Model {
    Key(u8),
    Objects(usize, u8),
    Keys(usize, u8),
    All,
    Filter(usize),
}

impl Model {
    fn dep(self, filters: &[Filter<Item>; 2]) -> Dep<Item> {
        match self {
            Self::Key(key) => Dep::Key(name(key)),
            Self::Objects(index, value) => Dep::Objects(index, value.to_string()),
            Self::Keys(index, value) => Dep::Keys(index, value.to_string()),
            Self::All => Dep::All,
            Self::Filter(filter) => Dep::Filter(filters[filter].clone()),
        }
    }

    /// Whether the change of `key` from `old` to `new` touches this read.
    fn touched(self, key: u8, old: Option<&Item>, new: Option<&Item>, f: &[Filter<Item>]) -> bool {
        let of = |index, item: Option<&Item>| item.map(|i| values(index, i)).unwrap_or_default();
        match self {
            Self::Key(read) => read == key,
            Self::Objects(index, value) => {
                let value = value.to_string();
                of(index, old).contains(&value) || of(index, new).contains(&value)
            }
            Self::Keys(index, value) => {
                let value = value.to_string();
                of(index, old).contains(&value) != of(index, new).contains(&value)
            }
            Self::All => true,
            Self::Filter(filter) => {
                let passes = |item: Option<&Item>| item.is_some_and(|i| f[filter].matches(i));
                passes(old) || passes(new)
            }
        }
    }
}

fn name(key: u8) -> String {
    format!("p{key}")
}

#[derive(Debug, Clone, Copy)]
enum End {
    Done,
    Cancelled,
    Gone,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Begin(u8),
    Read(u8, Model),
    End(u8, End),
    /// The object under the key becomes this (`None`: deleted).
    Change(u8, Option<(u8, u8, u8)>),
    Forget(u8),
}

const READERS: u8 = 4;
const KEYS: u8 = 5;

fn read() -> impl Strategy<Value = Model> {
    prop_oneof![
        3 => (0..KEYS).prop_map(Model::Key),
        2 => (0..2usize, 0..3u8).prop_map(|(i, v)| Model::Objects(i, v)),
        2 => (0..2usize, 0..3u8).prop_map(|(i, v)| Model::Keys(i, v)),
        1 => Just(Model::All),
        2 => (0..2usize).prop_map(Model::Filter),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let reader = 0..READERS;
    let end = prop_oneof![4 => Just(End::Done), 1 => Just(End::Cancelled), 1 => Just(End::Gone)];
    let item = proptest::option::weighted(0.8, (0..3u8, 0..8u8, 0..3u8));
    prop_oneof![
        2 => reader.clone().prop_map(Op::Begin),
        5 => (reader.clone(), read()).prop_map(|(r, m)| Op::Read(r, m)),
        2 => (reader.clone(), end).prop_map(|(r, e)| Op::End(r, e)),
        4 => (0..KEYS, item).prop_map(|(k, i)| Op::Change(k, i)),
        1 => reader.prop_map(Op::Forget),
    ]
}

/// One reader as the model sees it.
#[derive(Debug, Default)]
struct Reader {
    last: BTreeSet<Model>,
    running: Option<BTreeSet<Model>>,
}

impl Reader {
    fn reads(&self) -> BTreeSet<Model> {
        let running = self.running.iter().flatten();
        self.last.iter().chain(running).copied().collect()
    }
}

struct World {
    record: Record<Item, u8>,
    readers: BTreeMap<u8, Reader>,
    items: BTreeMap<u8, Item>,
    filters: [Filter<Item>; 2],
}

impl World {
    fn step(&mut self, op: Op) {
        match op {
            Op::Begin(r) => {
                let reader = self.readers.entry(r).or_default();
                reader.running.get_or_insert_with(BTreeSet::new);
            }
            Op::Read(r, read) => {
                let reader = self.readers.entry(r).or_default();
                // Reads come only from a running reconcile.
                if let Some(running) = &mut reader.running {
                    running.insert(read);
                    self.record.note(&r, read.dep(&self.filters));
                }
            }
            Op::End(r, end) => self.end(r, end),
            Op::Change(key, item) => self.change(key, item),
            Op::Forget(r) => {
                self.readers.remove(&r);
                self.record.forget(&r);
            }
        }
        self.record.check();
        let edges: usize = self.readers.values().map(|r| r.reads().len()).sum();
        assert_eq!(self.record.edges(), edges, "edges as in the model");
    }

    fn end(&mut self, r: u8, end: End) {
        let reader = self.readers.entry(r).or_default();
        let Some(running) = reader.running.take() else {
            return;
        };
        match end {
            End::Done => {
                reader.last = running;
                self.record.commit(&r);
            }
            End::Cancelled => {
                reader.last.extend(running);
                self.record.merge(&r);
            }
            End::Gone => {
                self.readers.remove(&r);
                self.record.forget(&r);
            }
        }
    }

    fn change(&mut self, key: u8, item: Option<(u8, u8, u8)>) {
        let new = item.map(|(group, tags, weight)| Item {
            name: name(key),
            group,
            tags,
            weight,
            version: Revision::ZERO,
        });
        let old = self.items.get(&key).cloned();
        let (old, new) = (old.as_ref(), new.as_ref());
        let expected: BTreeSet<u8> = self
            .readers
            .iter()
            .filter(|(_, reader)| {
                let touched = |read: &Model| read.touched(key, old, new, &self.filters);
                reader.reads().iter().any(touched)
            })
            .map(|(r, _)| *r)
            .collect();
        let mut woken = Vec::new();
        self.record
            .changed(&name(key), old, new, values, |r, _, _| {
                woken.push(*r);
                None
            });
        let unique: BTreeSet<u8> = woken.iter().copied().collect();
        assert_eq!(unique.len(), woken.len(), "each key woken once: {woken:?}");
        assert_eq!(unique, expected, "change of p{key} from {old:?} to {new:?}");
        match new {
            Some(new) => self.items.insert(key, new.clone()),
            None => self.items.remove(&key),
        };
    }
}

proptest! {
    #[test]
    fn every_change_wakes_exactly_the_keys_that_read_what_it_touched(
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut world = World {
            record: Record::new(),
            readers: BTreeMap::new(),
            items: BTreeMap::new(),
            filters: filters(),
        };
        for op in ops {
            world.step(op);
        }
        for r in 0..READERS {
            world.step(Op::Forget(r));
        }
        prop_assert_eq!(world.record.edges(), 0);
        prop_assert_eq!(world.record.readers().count(), 0);
    }
}

#[test]
fn past_the_most_reads_the_rest_count_as_a_read_of_every_object() {
    let mut record = Record::<Item, u8>::new();
    for n in 0..=MAX_READS {
        record.note(&0, Dep::Key(format!("k{n}")));
    }
    record.commit(&0);
    record.check();
    assert_eq!(
        record.edges(),
        MAX_READS + 1,
        "bounded: the reads, then every object"
    );
    let unread = Item {
        name: "never-read".into(),
        group: 0,
        tags: 0,
        weight: 0,
        version: Revision::ZERO,
    };
    let mut woken = Vec::new();
    record.changed(&unread.name, None, Some(&unread), values, |r, why, _| {
        woken.push((*r, why == Why::All));
        None
    });
    assert_eq!(woken, [(0, true)], "woken as a reader of every object");
}
