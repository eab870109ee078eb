//! `MemoryElectionGroup`: a leader election among candidates of one process.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::sync::watch;

use crate::client::FencingToken;
use crate::client::{Fences, Fencing};
use crate::election::{ElectionError, LeaderElector};

/// Who leads an [`MemoryElectionGroup`], and its token.
#[derive(Debug, Clone, Copy, Default)]
struct Term {
    leader: Option<u64>,
    token: u64,
}

/// A leader election among candidates of one process: for tests, and for a
/// single binary that runs several managers.
///
/// Clones share one election. Each [`candidate`](MemoryElectionGroup::candidate)
/// is a [`LeaderElector`] for one manager; the first to campaign leads until
/// it resigns, is dropped, or is [`depose`](MemoryElectionGroup::depose)d (a
/// simulated lease expiry). Tokens start at 1 and grow by one per new leader.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use tend::election::LeaderElector;
/// use tend::memory::MemoryElectionGroup;
///
/// let election = MemoryElectionGroup::new("my-operator");
/// let (a, b) = (election.candidate(), election.candidate());
/// assert_eq!(a.campaign().await.unwrap().get(), 1);
/// a.resign().await.unwrap();
/// assert_eq!(b.campaign().await.unwrap().get(), 2);
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryElectionGroup {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    term: watch::Sender<Term>,
    next_candidate: AtomicU64,
}

impl MemoryElectionGroup {
    /// A new election named `name`, with no leader.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            shared: Arc::new(Shared {
                name: name.into(),
                term: watch::Sender::new(Term::default()),
                next_candidate: AtomicU64::new(1),
            }),
        }
    }

    /// A new candidate in this election.
    #[must_use]
    pub fn candidate(&self) -> MemoryElection {
        MemoryElection {
            election: self.clone(),
            id: self.shared.next_candidate.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The current leader's fencing token, or `None` when no one leads.
    #[must_use]
    pub fn leader_token(&self) -> Option<FencingToken> {
        let term = *self.shared.term.borrow();
        term.leader.map(|_| FencingToken::new(term.token))
    }

    /// Takes the leadership away from the current leader, as an expired
    /// lease would: it observes the loss, and the next campaign wins.
    pub fn depose(&self) {
        self.shared.term.send_if_modified(|term| {
            let had = term.leader.is_some();
            term.leader = None;
            had
        });
    }

    fn release(&self, candidate: u64) {
        self.shared.term.send_if_modified(|term| {
            let led = term.leader == Some(candidate);
            if led {
                term.leader = None;
            }
            led
        });
    }
}

impl fmt::Debug for MemoryElectionGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let term = *self.shared.term.borrow();
        f.debug_struct("MemoryElectionGroup")
            .field("name", &self.shared.name)
            .field("leader", &term.leader)
            .field("token", &term.token)
            .finish()
    }
}

/// One candidate of an [`MemoryElectionGroup`]; dropping it resigns.
///
/// # Examples
///
/// ```
/// use tend::election::LeaderElector;
/// use tend::memory::MemoryElectionGroup;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::election::ElectionError> {
/// let election = MemoryElectionGroup::new("operator");
/// let (a, b) = (election.candidate(), election.candidate());
/// let token = a.campaign().await?;
/// assert!(a.is_leader() && !b.is_leader());
/// assert_eq!(election.leader_token(), Some(token));
///
/// election.depose(); // as an expired lease
/// a.lost().await; // resolves: `a` no longer leads
/// assert!(b.campaign().await? > token);
/// drop(b); // dropping a candidate resigns
/// assert_eq!(election.leader_token(), None);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryElection {
    election: MemoryElectionGroup,
    id: u64,
}

impl MemoryElection {
    /// Whether this candidate leads now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.election.shared.term.borrow().leader == Some(self.id)
    }
}

#[async_trait]
impl LeaderElector for MemoryElection {
    fn name(&self) -> &str {
        &self.election.shared.name
    }

    async fn campaign(&self) -> Result<FencingToken, ElectionError> {
        let mut changes = self.election.shared.term.subscribe();
        loop {
            let mut token = None;
            self.election.shared.term.send_if_modified(|term| {
                if term.leader == Some(self.id) {
                    token = Some(FencingToken::new(term.token));
                    false
                } else if term.leader.is_none() {
                    term.leader = Some(self.id);
                    term.token += 1;
                    token = Some(FencingToken::new(term.token));
                    true
                } else {
                    false
                }
            });
            if let Some(token) = token {
                return Ok(token);
            }
            // The sender lives as long as `self`: this cannot fail.
            let _ = changes.changed().await;
        }
    }

    async fn lost(&self) {
        let mut changes = self.election.shared.term.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = changes.wait_for(|term| term.leader != Some(self.id)).await;
    }

    async fn resign(&self) -> Result<(), ElectionError> {
        self.election.release(self.id);
        Ok(())
    }
}

impl Drop for MemoryElection {
    fn drop(&mut self) {
        self.election.release(self.id);
    }
}

/// A memory backend fenced by a candidate
/// ([`MemoryStore::client_fenced_by`](crate::memory::MemoryStore::client_fenced_by))
/// takes a write only while its token is the election's leader's. The
/// check holds the election, not the candidate: it does not keep the
/// candidacy alive.
impl Fences for MemoryElection {
    fn fencing(&self) -> Arc<dyn Fencing> {
        Arc::new(LeaderToken(self.election.clone()))
    }
}

/// The election's check: whether a token is its current leader's.
struct LeaderToken(MemoryElectionGroup);

impl Fencing for LeaderToken {
    fn is_current(&self, token: FencingToken) -> bool {
        self.0.leader_token() == Some(token)
    }
}
