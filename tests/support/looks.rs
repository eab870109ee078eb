//! A reconciler that writes down, for each reconcile, its replica, its key
//! and whether the cache had the object: the scoped-cache tests check that
//! no key is reconciled against a cache that lacks it.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::fmt::Display;
use std::sync::Arc;

use parking_lot::Mutex;
use tend::Object;
use tend::controller::{Action, Context, Reconciler};

/// One reconcile.
#[derive(Debug, Clone)]
pub struct Looked {
    pub replica: &'static str,
    pub key: String,
    pub present: bool,
}

pub type Looks = Arc<Mutex<Vec<Looked>>>;

#[derive(Clone)]
pub struct Looker {
    pub replica: &'static str,
    pub looks: Looks,
}

impl<O: Object<Key: Display>> Reconciler<O> for Looker {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<O>) -> Result<Action, Infallible> {
        self.looks.lock().push(Looked {
            replica: self.replica,
            key: ctx.key().to_string(),
            present: ctx.object().is_some(),
        });
        Ok(Action::Done)
    }
}

/// Whether every key in `keys` was reconciled on `owner(key)` at or after
/// entry `from` of the log.
pub fn reconciled_by_owners(
    looks: &Looks,
    keys: &[String],
    owner: impl Fn(&str) -> Option<String>,
    from: usize,
) -> bool {
    let looks = looks.lock();
    keys.iter().all(|key| {
        let Some(owner) = owner(key) else {
            return false;
        };
        looks[from.min(looks.len())..]
            .iter()
            .any(|look| &look.key == key && look.replica == owner)
    })
}

/// Fails when a reconcile found its cache without the object (nothing is
/// deleted in these tests).
pub fn every_reconcile_saw_its_object(looks: &Looks) {
    let looks = looks.lock();
    let missing: Vec<&Looked> = looks.iter().filter(|look| !look.present).collect();
    assert!(
        missing.is_empty(),
        "reconciled against a cache that lacked the object: {missing:?}"
    );
}
