//! `FencingToken`: the number a leadership or a shard's ownership writes
//! with; `Fencing`: the authority that says whether one is current;
//! `Fences`: what a backend's `client_fenced_by` takes, by reference.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The number a leader (or a shard's owner) writes with: issued by an
/// election's [`campaign`](crate::election::LeaderElector::campaign) or a
/// membership's [`acquire`](crate::shard::Membership::acquire), handed to a
/// reconcile as [`Context::fencing_token`](crate::controller::Context::fencing_token),
/// and checked by a fenced [`Client`](super::Client) on every write. Tokens
/// of one election (or one membership group) only grow, so a newer term
/// compares greater.
///
/// ```
/// use tend::client::FencingToken;
///
/// let old = FencingToken::new(7);
/// let new = FencingToken::new(8);
/// assert!(new > old);
/// assert_eq!(new.get(), 8);
/// assert_eq!(new.to_string(), "8");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token numbered `token`.
    #[must_use]
    pub const fn new(token: u64) -> Self {
        Self(token)
    }

    /// Its number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Says whether a fencing token is the current leader's (or owner's).
///
/// A backend that checks fencing in-process (the memory backend, see
/// [`MemoryStore::client_fenced_by`](crate::memory::MemoryStore::client_fenced_by))
/// asks it on every fenced write, under its own lock and atomically with
/// the write. A backend's candidates and members hand theirs out through
/// [`Fences`]; a test can also implement it over a counter it controls
/// (every `Fencing + Clone` is [`Fences`]).
///
/// `is_current` runs under the backend's lock: keep it quick, and never
/// write to the same backend from it.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tend::client::{Fencing, FencingToken};
///
/// /// The current token is the counter's value.
/// #[derive(Debug, Default)]
/// struct Epoch(AtomicU64);
///
/// impl Fencing for Epoch {
///     fn is_current(&self, token: FencingToken) -> bool {
///         self.0.load(Ordering::SeqCst) == token.get()
///     }
/// }
///
/// let epoch = Arc::new(Epoch::default());
/// epoch.0.store(2, Ordering::SeqCst);
/// assert!(epoch.is_current(FencingToken::new(2)) && !epoch.is_current(FencingToken::new(1)));
/// ```
pub trait Fencing: Send + Sync + 'static {
    /// Whether `token` is current now.
    fn is_current(&self, token: FencingToken) -> bool;
}

impl<F: Fencing + ?Sized> Fencing for std::sync::Arc<F> {
    fn is_current(&self, token: FencingToken) -> bool {
        (**self).is_current(token)
    }
}

/// What a fenced client checks its writes' tokens against, passed to a
/// backend's `client_fenced_by` by reference: an election's candidate
/// ([`MemoryElection`](crate::memory::MemoryElection), `tend::kube::KubeElection`)
/// or a membership's member ([`MemoryMembership`](crate::memory::MemoryMembership)),
/// or any [`Fencing`] that is `Clone` (kept by the client as a clone, so
/// it lives as long as the client). etcd checks the token in etcd itself:
/// its `client_fenced_by` takes `&EtcdElection` or `&EtcdMembership` the
/// same way, and its client holds a handle of that election or
/// membership, whose lease then stays renewed while the client lives.
///
/// The checks of the memory backend's candidates and members and of a
/// `KubeElection` hold the group or the term, not the candidate: they do
/// not keep the candidacy alive. A dropped memory candidate resigns at
/// once; a dropped `KubeElection`'s token stops being current at its local
/// deadline.
///
/// # Examples
///
/// ```
/// use tend::client::{Fences, Fencing};
/// use tend::election::LeaderElector;
/// use tend::memory::MemoryElectionGroup;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::election::ElectionError> {
/// let election = MemoryElectionGroup::new("operator");
/// let candidate = election.candidate();
/// let check = candidate.fencing(); // what `client_fenced_by(&candidate)` keeps
/// let token = candidate.campaign().await?;
/// assert!(check.is_current(token));
/// drop(candidate); // resigns: its tokens stop being current
/// assert!(!check.is_current(token));
/// # Ok(()) }
/// ```
pub trait Fences {
    /// The check, detached from the candidate or member.
    fn fencing(&self) -> std::sync::Arc<dyn Fencing>;
}

impl<F: Fencing + Clone> Fences for F {
    fn fencing(&self) -> std::sync::Arc<dyn Fencing> {
        std::sync::Arc::new(self.clone())
    }
}
