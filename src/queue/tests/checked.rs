//! The core beside its model, driven through one random sequence of ops
//! (the property test).

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::bound::Waits;
use super::model::{Model, Op, op};
use super::{Bits, NONE, take_with_payload};
use crate::queue::Priority;
use crate::queue::core::{Core, Handed, Next, Restored};
use crate::queue::stamp::Stamp;

/// The core beside the model, driven through one sequence of ops.
struct Checked {
    t0: Stamp,
    core: Core<u8, Bits>,
    model: Model,
    now: u64,
    /// Keys handed out, with what a restore needs.
    held: Vec<Handed<u8, Bits>>,
    waits: Waits,
}

impl Checked {
    fn new(max_wait: u64, debounce: Option<(u64, u64)>, group: Option<fn(u8) -> u8>) -> Self {
        let mut core = Core::new(Duration::from_millis(max_wait));
        if let Some(group) = group {
            core = core.with_groups(Arc::new(move |key: &u8| u64::from(group(*key))));
        }
        if let Some((window, max)) = debounce {
            let (window, max) = (Duration::from_millis(window), Duration::from_millis(max));
            core = core.with_debounce(crate::queue::core::Debounce { window, max });
        }
        let model = Model::new(max_wait, debounce, group);
        Self {
            t0: Stamp::default(),
            core,
            model,
            now: 0,
            held: Vec::new(),
            waits: Waits::default(),
        }
    }

    fn ms(&self, m: u64) -> Stamp {
        self.t0.after(Duration::from_millis(m))
    }

    /// Applies `op` to both, checking what the core answers, then the
    /// sizes (invariant 1: each key at most once) and the fairness bound.
    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        let now = self.now;
        let (mut served, mut handed_back) = (None, None);
        match op {
            Op::Add(key, p, payload) => {
                let at = self.ms(now);
                self.core.add(key, Priority::new(p), payload, || at);
                self.model.add(key, Priority::new(p), payload, now);
            }
            Op::AddAfter(key, delay, p, payload) => {
                self.core.add_after(
                    key,
                    self.ms(now + delay),
                    Priority::new(p),
                    payload,
                    self.ms(now),
                );
                self.model
                    .add_after(key, now + delay, now, Priority::new(p), payload);
            }
            Op::Debounce(key, p, payload) => {
                let at = self.ms(now);
                self.core.debounce(key, Priority::new(p), payload, || at);
                self.model.debounce(key, Priority::new(p), payload, now);
            }
            Op::MergePending(key, payload) => {
                let pending = self.core.merge_pending(&key, payload);
                prop_assert_eq!(
                    pending,
                    !self.model.shut_down && self.model.merge_pending(key, payload)
                );
            }
            Op::Get => served = self.get()?,
            Op::Restore(i) => handed_back = self.restore(i)?,
            Op::Done(i) if !self.held.is_empty() => {
                let key = self.held.remove(i % self.held.len()).key;
                prop_assert!(self.core.done(&key, self.ms(now)).is_ok());
                self.model.done(key, now);
            }
            Op::Done(_) => prop_assert!(self.core.done(&0, self.ms(now)).is_err()),
            Op::Advance(d) => self.now += d,
            Op::Shutdown => {
                self.core.shut_down();
                self.model.shut_down = true;
                self.model.ready.clear();
                self.model.turns.clear();
                self.model.timers.clear();
                self.model.dirty.clear();
            }
        }
        prop_assert_eq!(self.core.ready_len(), self.model.ready.len());
        prop_assert_eq!(self.core.scheduled_len(), self.model.timers.len());
        prop_assert_eq!(self.core.in_flight_len(), self.held.len());
        self.waits.check(&self.model, served, handed_back)
    }

    /// Takes a key from both; returns it with its level.
    fn get(&mut self) -> Result<Option<(u8, Priority)>, TestCaseError> {
        let got = match self.core.next(self.ms(self.now)) {
            Next::Key { handed, waited, .. } => Some((handed, waited)),
            Next::Empty { .. } | Next::ShutDown => None,
        };
        let expected = if self.model.shut_down {
            None
        } else {
            self.model.next(self.now)
        };
        prop_assert_eq!(got.as_ref().map(|(h, w)| (h.key, h.payload, *w)), expected);
        if let Some((taken, _)) = got {
            // Invariant 2: never handed to two workers at once.
            prop_assert!(
                !self.held.iter().any(|h| h.key == taken.key),
                "{} handed out twice",
                taken.key
            );
            let served = (taken.key, taken.priority);
            self.held.push(taken);
            return Ok(Some(served));
        }
        Ok(None)
    }

    /// Hands a held key back to both; returns it with the level it is
    /// ready at.
    fn restore(&mut self, i: usize) -> Result<Option<(u8, Priority)>, TestCaseError> {
        if self.held.is_empty() {
            let stray = Handed {
                key: 0,
                payload: NONE,
                priority: Priority::NORMAL,
                since: self.ms(self.now),
            };
            prop_assert_eq!(self.core.restore(stray), Restored::NotInFlight);
            return Ok(None);
        }
        let handed = self.held.remove(i % self.held.len());
        let (key, priority, payload) = (handed.key, handed.priority, handed.payload);
        let restored = self.core.restore(handed);
        let expected = if self.model.shut_down {
            Restored::Dropped
        } else {
            Restored::Ready
        };
        prop_assert_eq!(restored, expected);
        self.model.restore(key, priority, payload);
        let ready = self.model.ready.iter().find(|e| e.key == key);
        Ok(ready.map(|e| (key, e.priority)))
    }

    /// Invariant 3: nothing added is lost. Finishes all work, lets every
    /// timer fire, and serves until empty: exactly the model's keys come out.
    fn finish(mut self) -> Result<(), TestCaseError> {
        if self.model.shut_down {
            return Ok(());
        }
        let now = self.now;
        for Handed { key, .. } in std::mem::take(&mut self.held) {
            self.core.done(&key, self.ms(now)).expect("in flight");
            self.model.done(key, now);
        }
        let later = self.ms(now + 1_000);
        loop {
            let got = take_with_payload(&mut self.core, later);
            prop_assert_eq!(
                got,
                self.model
                    .next(now + 1_000)
                    .map(|(key, payload, _)| (key, payload))
            );
            let Some((key, _)) = got else { break };
            self.core.done(&key, later).expect("in flight");
            self.model.done(key, now + 1_000);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The core against the model: same keys handed out in the same order
    /// (aging included: `max_wait` is within reach of the steps), with the
    /// same payload and waits, same sizes, and the five invariants checked
    /// after every step; with or without a debounce (window and bound
    /// within reach of the steps).
    /// With key groups (a key's remainder by 3), the groups at each level
    /// take turns, and no key waits past its fairness bound (`bound.rs`).
    #[test]
    fn core_behaves_like_the_model(
        max_wait in 0..80u64,
        debounce in proptest::option::of((1..20u64).prop_flat_map(|w| (Just(w), w..80))),
        grouped in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let group: Option<fn(u8) -> u8> = grouped.then_some(|key| key % 3);
        let mut checked = Checked::new(max_wait, debounce, group);
        for op in ops {
            checked.step(op)?;
        }
        checked.finish()?;
    }
}
