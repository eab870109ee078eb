//! Fences: the compares that make an etcd write conditional on a fencing
//! token, and the authorities that issue them (an election's leadership, a
//! shard membership's ownership records).

use etcd_client::{Compare, TxnOp, TxnOpResponse};

use super::election::EtcdElection;
use super::membership::EtcdMembership;
use crate::client::FencingToken;

/// What makes a write fenced by a token: comparisons that hold while the
/// token is current in etcd (each compares a key's create revision with
/// the token), and reads of those keys that tell, when the transaction is
/// refused, whether the fence was why.
pub(super) struct Fence {
    /// Added to the write's comparisons.
    pub(super) compares: Vec<Compare>,
    /// Added to the end of the write's `or_else` operations.
    pub(super) reads: Vec<TxnOp>,
    token: FencingToken,
}

impl Fence {
    /// A fence of `token`: `compares` hold while it is current; each of
    /// `reads` reads one key that has the token as its create revision
    /// while it is.
    pub(super) fn new(token: FencingToken, compares: Vec<Compare>, reads: Vec<TxnOp>) -> Self {
        Self {
            compares,
            reads,
            token,
        }
    }

    /// The token the fence checks.
    pub(super) fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether the fence held in a refused transaction, from the responses
    /// to [`reads`](Self::reads) (in order): each read a key with the token
    /// as its create revision. An unreadable answer counts as not holding.
    pub(super) fn held(&self, reads: &[TxnOpResponse]) -> bool {
        let token = revision_of(self.token);
        reads.len() == self.reads.len()
            && reads.iter().all(|read| match read {
                TxnOpResponse::Get(get) => {
                    get.kvs()
                        .first()
                        .map(etcd_client::KeyValue::create_revision)
                        == token
                }
                _ => false,
            })
    }
}

/// What the fenced writes of an etcd client
/// ([`EtcdSource::client_fenced_by`](super::EtcdSource::client_fenced_by))
/// are checked against, in etcd itself: an [`EtcdElection`] (the token is
/// the leader's) or an [`EtcdMembership`] (the token is one of the shards
/// this member owns). Made with `From` from a reference to either.
#[derive(Debug, Clone)]
pub struct FenceAuthority(Authority);

#[derive(Debug, Clone)]
enum Authority {
    Election(EtcdElection),
    Membership(EtcdMembership),
}

impl FenceAuthority {
    /// The fence of a write with `token`: `None` when the authority says
    /// at once (before its local deadline) that the token is not current.
    pub(super) fn fence(&self, token: FencingToken) -> Option<Fence> {
        match &self.0 {
            Authority::Election(election) => election.fence(token),
            Authority::Membership(membership) => membership.fence(token),
        }
    }
}

impl From<&EtcdElection> for FenceAuthority {
    fn from(election: &EtcdElection) -> Self {
        Self(Authority::Election(election.clone()))
    }
}

impl From<&EtcdMembership> for FenceAuthority {
    fn from(membership: &EtcdMembership) -> Self {
        Self(Authority::Membership(membership.clone()))
    }
}

/// The fencing token a key's create revision stands for (etcd's
/// revisions are positive; `None` for one that is not).
pub(super) fn token_of(revision: i64) -> Option<FencingToken> {
    u64::try_from(revision).ok().map(FencingToken::new)
}

/// The create revision a fencing token stands for.
pub(super) fn revision_of(token: FencingToken) -> Option<i64> {
    i64::try_from(token.get()).ok()
}
