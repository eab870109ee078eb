//! The fairness bound, checked on the steps of the model test: a ready key
//! with `i` keys ahead in its group, G groups ready at its level when it is
//! seen and at most Ĝ while it waits, is handed out after at most
//! `(G - 1) + i × Ĝ` hand-outs of others from its level. A key handed back
//! to its level meanwhile goes first again: one of another group adds one
//! hand-out to the bound, one of its own group one key ahead (`i + 1`).

use std::collections::HashMap;

use proptest::prelude::*;

use super::model::Model;
use crate::queue::Priority;

/// A ready key being watched.
struct Wait {
    priority: Priority,
    order: i64,
    ahead: usize,
    groups: usize,
    most_groups: usize,
    others_served: usize,
    /// Keys handed back to its level since it was seen, of other groups.
    handed_back: usize,
}

#[derive(Default)]
pub(super) struct Waits(HashMap<u8, Wait>);

impl Waits {
    /// After a step that handed out `served`, or handed `handed_back` back
    /// (each a key and its level).
    pub(super) fn check(
        &mut self,
        model: &Model,
        served: Option<(u8, Priority)>,
        handed_back: Option<(u8, Priority)>,
    ) -> Result<(), TestCaseError> {
        if model.shut_down {
            self.0.clear();
        }
        if let Some((back, level)) = handed_back {
            let group = model.turns.group(back);
            for (key, wait) in self.0.iter_mut().filter(|(_, w)| w.priority == level) {
                if model.turns.group(*key) == group {
                    wait.ahead += 1;
                } else {
                    wait.handed_back += 1;
                }
            }
        }
        if let Some((key, level)) = served {
            self.0.remove(&key);
            for wait in self.0.values_mut().filter(|w| w.priority == level) {
                wait.others_served += 1;
            }
        }
        // A key moved (raised, served) is watched afresh.
        self.0.retain(|key, wait| {
            model
                .ready
                .iter()
                .any(|e| e.key == *key && e.priority == wait.priority && e.order == wait.order)
        });
        for entry in &model.ready {
            let groups = model.turns.active(entry.priority);
            let wait = self.0.entry(entry.key).or_insert_with(|| Wait {
                priority: entry.priority,
                order: entry.order,
                ahead: model.turns.ahead(&model.ready, entry),
                groups,
                most_groups: groups,
                others_served: 0,
                handed_back: 0,
            });
            wait.most_groups = wait.most_groups.max(groups);
            let bound = (wait.groups - 1) + wait.ahead * wait.most_groups + wait.handed_back;
            prop_assert!(
                wait.others_served <= bound,
                "key {} waited {} hand-outs, over its bound {}",
                entry.key,
                wait.others_served,
                bound
            );
        }
        Ok(())
    }
}
