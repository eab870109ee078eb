//! The candidacy as the holder of its lease: renewals move its term's
//! deadline, and while leading the leader's key is read back.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Phase, Term};
use crate::etcd::lease::{Held, Holder};

/// A candidacy's term and its key, for the lease's keeper.
pub(super) struct Candidate {
    pub(super) term: Arc<watch::Sender<Term>>,
    pub(super) key: Vec<u8>,
}

impl Holder for Candidate {
    fn held(&self) -> Option<Held> {
        let term = *self.term.borrow();
        let key = match term.phase {
            Phase::Lost | Phase::Idle => return None,
            Phase::Leading(token) => Some((self.key.clone(), token)),
            Phase::Campaigning => None,
        };
        Some(Held {
            renewed: term.renewed,
            key,
        })
    }

    fn renewed(&self, sent: Instant) {
        self.term.send_modify(|term| term.renewed = sent);
    }

    fn expired(&self) {
        self.term.send_modify(|term| {
            term.lease_alive = false;
            if matches!(term.phase, Phase::Leading(_)) {
                term.phase = Phase::Lost;
            }
        });
    }
}
