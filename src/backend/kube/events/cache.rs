//! The recorder's memory of recent events: a bounded map from an event's
//! identity to the Event object that records it and its count, evicting
//! the least recently seen; and the protocol that keeps one write per
//! Event in flight. Pure: no requests, the clock passed in.
//!
//! # Invariants
//!
//! - At most `capacity` entries; `order` holds exactly one stamp per
//!   entry, the entry's own.
//! - An entry with `writing` has one writer, which calls
//!   [`RecentEvents::written`] (or `forget`/`abandon`) when its request ends, and
//!   writes again while the count moved on: a repeat published meanwhile
//!   is carried by that writer, never lost and never written out of order.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::time::Instant;

/// The write a publish must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    /// Create the Event `name` (the first occurrence).
    Create { name: String },
    /// Set the series of the Event `name` to `count` occurrences.
    Series { name: String, count: u32 },
}

impl Write {
    pub(super) fn name(&self) -> &str {
        match self {
            Self::Create { name } | Self::Series { name, .. } => name,
        }
    }

    fn count(&self) -> u32 {
        match self {
            Self::Create { .. } => 1,
            Self::Series { count, .. } => *count,
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// The Event object's name.
    name: String,
    /// Occurrences seen, the first one included.
    count: u32,
    /// When the last occurrence was seen.
    last: Instant,
    /// Whether a write for this Event is in flight.
    writing: bool,
    /// This entry's place in `order`.
    stamp: u64,
}

/// Recent events by identity, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct RecentEvents<K> {
    capacity: NonZeroUsize,
    entries: HashMap<K, Entry>,
    /// Entries by last use, oldest first.
    order: BTreeMap<u64, K>,
    next_stamp: u64,
}

impl<K: Hash + Eq + Clone> RecentEvents<K> {
    pub(super) fn new(capacity: NonZeroUsize) -> Self {
        Self {
            capacity,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_stamp: 0,
        }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Counts one occurrence of `key` at `now`: a repeat within `window`
    /// of the last one joins its series; anything else starts a new Event
    /// named `fresh()`. Returns the write to make, or `None` when a write
    /// in flight will carry this occurrence.
    pub(super) fn observe(
        &mut self,
        key: &K,
        now: Instant,
        window: Duration,
        fresh: impl FnOnce() -> String,
    ) -> Option<Write> {
        let stamp = self.stamp();
        if let Some(entry) = self.entries.get_mut(key)
            && now < crate::time::deadline(entry.last, window)
        {
            self.order.remove(&entry.stamp);
            self.order.insert(stamp, key.clone());
            entry.stamp = stamp;
            entry.count = entry.count.saturating_add(1);
            entry.last = now;
            if entry.writing {
                return None;
            }
            entry.writing = true;
            return Some(Write::Series {
                name: entry.name.clone(),
                count: entry.count,
            });
        }
        let name = fresh();
        self.insert(key, name.clone(), now, stamp);
        Some(Write::Create { name })
    }

    /// `write` succeeded: the next write to make while the count moved on
    /// meanwhile, else `None` (the entry is idle again, or gone).
    pub(super) fn written(&mut self, key: &K, write: &Write) -> Option<Write> {
        let entry = self.entry(key, write.name())?;
        if entry.count > write.count() {
            return Some(Write::Series {
                name: entry.name.clone(),
                count: entry.count,
            });
        }
        entry.writing = false;
        None
    }

    /// The Event `name` is gone (expired on the server): a new one,
    /// named `fresh`, records this event from now on. `None` when the
    /// entry is no longer `name`'s.
    pub(super) fn restart(&mut self, key: &K, name: &str, fresh: String) -> Option<Write> {
        let entry = self.entry(key, name)?;
        entry.name = fresh.clone();
        entry.count = 1;
        Some(Write::Create { name: fresh })
    }

    /// Forgets `key` if its Event is `name` (its creation failed).
    pub(super) fn forget(&mut self, key: &K, name: &str) {
        if let Some(entry) = self.entry(key, name) {
            let stamp = entry.stamp;
            self.entries.remove(key);
            self.order.remove(&stamp);
        }
    }

    /// A write for `name` failed: the next occurrence writes again.
    pub(super) fn abandon(&mut self, key: &K, name: &str) {
        if let Some(entry) = self.entry(key, name) {
            entry.writing = false;
        }
    }

    fn entry(&mut self, key: &K, name: &str) -> Option<&mut Entry> {
        self.entries.get_mut(key).filter(|entry| entry.name == name)
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// Inserts (or replaces) `key`'s entry, evicting the least recently
    /// seen entry when full.
    fn insert(&mut self, key: &K, name: String, now: Instant, stamp: u64) {
        let entry = Entry {
            name,
            count: 1,
            last: now,
            writing: true,
            stamp,
        };
        if let Some(old) = self.entries.insert(key.clone(), entry) {
            self.order.remove(&old.stamp);
        }
        self.order.insert(stamp, key.clone());
        while self.entries.len() > self.capacity.get() {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const WINDOW: Duration = Duration::from_secs(600);

    fn cache(capacity: usize) -> RecentEvents<u32> {
        RecentEvents::new(NonZeroUsize::new(capacity).unwrap())
    }

    fn named(name: &str) -> impl FnOnce() -> String + '_ {
        move || name.to_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_within_the_window_join_one_series() {
        let mut cache = cache(8);
        let now = Instant::now();
        let first = cache.observe(&1, now, WINDOW, named("e1"));
        assert_eq!(first, Some(Write::Create { name: "e1".into() }));
        assert_eq!(cache.written(&1, &first.unwrap()), None);
        for count in 2..=5 {
            let write = cache.observe(&1, now, WINDOW, named("other"));
            let expected = Write::Series {
                name: "e1".into(),
                count,
            };
            assert_eq!(write.as_ref(), Some(&expected));
            assert_eq!(cache.written(&1, &expected), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_after_the_window_starts_a_new_event() {
        let mut cache = cache(8);
        let write = cache
            .observe(&1, Instant::now(), WINDOW, named("e1"))
            .unwrap();
        cache.written(&1, &write);
        tokio::time::advance(WINDOW - Duration::from_millis(1)).await;
        let write = cache
            .observe(&1, Instant::now(), WINDOW, named("e2"))
            .unwrap();
        assert_eq!(write.name(), "e1", "within the window of the last repeat");
        cache.written(&1, &write);
        tokio::time::advance(WINDOW).await;
        let write = cache.observe(&1, Instant::now(), WINDOW, named("e2"));
        assert_eq!(write, Some(Write::Create { name: "e2".into() }));
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_during_a_write_are_carried_by_its_writer_in_order() {
        let mut cache = cache(8);
        let now = Instant::now();
        let create = cache.observe(&1, now, WINDOW, named("e1")).unwrap();
        // Two repeats while the create is in flight: no second writer.
        assert_eq!(cache.observe(&1, now, WINDOW, named("x")), None);
        assert_eq!(cache.observe(&1, now, WINDOW, named("x")), None);
        let next = cache.written(&1, &create);
        let series = Write::Series {
            name: "e1".into(),
            count: 3,
        };
        assert_eq!(next.as_ref(), Some(&series));
        assert_eq!(cache.written(&1, &series), None);
        // Idle again: the next repeat writes.
        assert!(cache.observe(&1, now, WINDOW, named("x")).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_create_is_forgotten_and_a_failed_series_written_again() {
        let mut cache = cache(8);
        let now = Instant::now();
        let create = cache.observe(&1, now, WINDOW, named("e1")).unwrap();
        cache.forget(&1, create.name());
        assert_eq!(cache.len(), 0);
        let create = cache.observe(&1, now, WINDOW, named("e2")).unwrap();
        cache.written(&1, &create);
        let series = cache.observe(&1, now, WINDOW, named("x")).unwrap();
        cache.abandon(&1, series.name());
        let again = cache.observe(&1, now, WINDOW, named("x"));
        assert_eq!(
            again,
            Some(Write::Series {
                name: "e2".into(),
                count: 3
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_event_restarts_under_a_new_name() {
        let mut cache = cache(8);
        let now = Instant::now();
        let create = cache.observe(&1, now, WINDOW, named("e1")).unwrap();
        cache.written(&1, &create);
        let series = cache.observe(&1, now, WINDOW, named("x")).unwrap();
        let restart = cache.restart(&1, series.name(), "e2".into());
        assert_eq!(restart, Some(Write::Create { name: "e2".into() }));
        assert_eq!(cache.restart(&1, "e1", "e3".into()), None);
        cache.written(&1, &restart.unwrap());
        let next = cache.observe(&1, now, WINDOW, named("x")).unwrap();
        assert_eq!(
            next,
            Write::Series {
                name: "e2".into(),
                count: 2
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_is_bounded_and_evicts_the_least_recently_seen() {
        let mut cache = cache(3);
        let now = Instant::now();
        for key in 0..3 {
            let write = cache
                .observe(&key, now, WINDOW, || format!("e{key}"))
                .unwrap();
            cache.written(&key, &write);
        }
        // Seeing 0 again makes 1 the least recently seen.
        let write = cache.observe(&0, now, WINDOW, named("x")).unwrap();
        cache.written(&0, &write);
        let write = cache.observe(&3, now, WINDOW, named("e3")).unwrap();
        cache.written(&3, &write);
        assert_eq!(cache.len(), 3);
        assert!(matches!(
            cache.observe(&0, now, WINDOW, named("x")),
            Some(Write::Series { .. })
        ));
        assert_eq!(
            cache.observe(&1, now, WINDOW, named("e1b")),
            Some(Write::Create { name: "e1b".into() }),
            "the least recently seen entry was not evicted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_window_never_aggregates_and_a_huge_one_does_not_overflow() {
        let mut cache = cache(8);
        let now = Instant::now();
        cache.observe(&1, now, Duration::ZERO, named("e1"));
        let write = cache.observe(&1, now, Duration::ZERO, named("e2"));
        assert_eq!(write, Some(Write::Create { name: "e2".into() }));
        cache.written(&1, &write.unwrap());
        let write = cache.observe(&1, now, Duration::MAX, named("e3"));
        assert!(matches!(write, Some(Write::Series { count: 2, .. })));
    }

    /// One step of a random history: an occurrence of a key, or the end of
    /// the oldest write in flight.
    #[derive(Debug, Clone)]
    enum Step {
        Observe(u8),
        Finish,
    }

    proptest! {
        #[test]
        fn the_cache_stays_bounded_and_each_event_has_one_writer_counting_up(
            capacity in 1usize..6,
            steps in proptest::collection::vec(
                prop_oneof![(0u8..10).prop_map(Step::Observe), Just(Step::Finish)],
                0..200,
            ),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let _time = runtime.enter();
            let mut cache = RecentEvents::new(NonZeroUsize::new(capacity).unwrap());
            let now = Instant::now();
            let mut names = 0u32;
            // Writes in flight, by key; the last count written per name.
            let mut flying: Vec<(u8, Write)> = Vec::new();
            let mut written: HashMap<String, u32> = HashMap::new();
            for step in steps {
                match step {
                    Step::Observe(key) => {
                        let write = cache.observe(&key, now, WINDOW, || {
                            names += 1;
                            format!("e{names}")
                        });
                        if let Some(write) = write {
                            prop_assert!(
                                !flying.iter().any(|(_, w)| w.name() == write.name()),
                                "two writers for {}", write.name()
                            );
                            flying.push((key, write));
                        }
                    }
                    Step::Finish if !flying.is_empty() => {
                        let (key, write) = flying.remove(0);
                        let last = written.insert(write.name().to_owned(), write.count());
                        prop_assert!(last.is_none_or(|last| last < write.count()));
                        if let Some(next) = cache.written(&key, &write) {
                            flying.push((key, next));
                        }
                    }
                    Step::Finish => {}
                }
                prop_assert!(cache.len() <= capacity);
                prop_assert_eq!(cache.order.len(), cache.len());
            }
        }
    }
}
