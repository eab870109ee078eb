//! The fence: what makes a write conditional on a leadership.

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, TxnOp, TxnOpResponse};

use super::EtcdElection;
use crate::etcd::prefix_end;

impl EtcdElection {
    /// The fence of a write with `token`: `None` unless this candidate
    /// leads with `token` now (before its local deadline).
    pub(in crate::etcd) fn fence(&self, token: u64) -> Option<Fence> {
        if self.token() != Some(token) {
            return None;
        }
        let key = self.inner.candidacy.lock().as_ref()?.key.clone();
        let created = i64::try_from(token).ok()?;
        let prefix = &self.inner.prefix;
        let oldest = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        Some(Fence {
            compares: vec![
                Compare::create_revision(key.clone(), CompareOp::Equal, created),
                Compare::create_revision(prefix.clone(), CompareOp::Greater, created - 1)
                    .with_range(prefix_end(prefix)),
            ],
            reads: vec![
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(prefix.clone(), Some(oldest)),
            ],
            token,
        })
    }
}

/// What makes a write fenced by a token: comparisons that hold while the
/// token's candidate leads (its key exists with the token as its create
/// revision, and no candidate is older), and reads that tell, when the
/// transaction is refused, whether the fence was why.
pub(in crate::etcd) struct Fence {
    /// Added to the write's comparisons.
    pub(in crate::etcd) compares: Vec<Compare>,
    /// Added to the end of the write's `or_else` operations.
    pub(in crate::etcd) reads: Vec<TxnOp>,
    token: u64,
}

impl Fence {
    /// The token the fence checks.
    pub(in crate::etcd) fn token(&self) -> u64 {
        self.token
    }

    /// Whether the fence held in a refused transaction, from the responses
    /// to [`reads`](Self::reads) (in order). An unreadable answer counts as
    /// not holding.
    pub(in crate::etcd) fn held(&self, reads: &[TxnOpResponse]) -> bool {
        let token = i64::try_from(self.token).ok();
        reads.len() == 2
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
