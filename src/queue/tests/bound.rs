//! The fairness bound, checked on the steps of the model test: a ready key
//! with `i` keys ahead in its group, G groups ready at its level when it is
//! seen and at most Ĝ while it waits, is handed out after at most
//! `(G - 1) + i × Ĝ` hand-outs of others from its level. A hand-back (whose
//! key goes first again) starts the count over.

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
}

#[derive(Default)]
pub(super) struct Waits(HashMap<u8, Wait>);

impl Waits {
    /// After a step that handed out `served` (its key and level), or handed
    /// a key back (`reset`).
    pub(super) fn check(
        &mut self,
        model: &Model,
        served: Option<(u8, Priority)>,
        reset: bool,
    ) -> Result<(), TestCaseError> {
        if reset || model.shut_down {
            self.0.clear();
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
            });
            wait.most_groups = wait.most_groups.max(groups);
            let bound = (wait.groups - 1) + wait.ahead * wait.most_groups;
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
