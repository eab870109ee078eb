//! `LeaseFencing`: whether a token is the current leadership's, for the
//! Kubernetes client's local fencing check.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

use super::Term;
use crate::client::Fencing;
use crate::client::FencingToken;
use crate::election::ElectionConfig;

/// Says whether a fencing token is the current leadership's of a
/// [`KubeElection`](super::KubeElection): true while that candidate
/// leads with the token and before its local deadline. Handed out by the
/// candidate's [`Fences`](crate::client::Fences) impl.
///
/// It holds no request of its own and does not keep the candidacy alive:
/// once the election's handles are gone (a crashed task), the renewals
/// stop and the token stops being current at the local deadline.
#[derive(Clone)]
pub(super) struct LeaseFencing {
    term: Arc<watch::Sender<Term>>,
    config: ElectionConfig,
}

impl LeaseFencing {
    pub(super) fn new(term: Arc<watch::Sender<Term>>, config: ElectionConfig) -> Self {
        Self { term, config }
    }
}

impl Fencing for LeaseFencing {
    fn is_current(&self, token: FencingToken) -> bool {
        self.term.borrow().token(&self.config) == Some(token)
    }
}

impl fmt::Debug for LeaseFencing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseFencing")
            .field("phase", &self.term.borrow().phase)
            .finish_non_exhaustive()
    }
}
