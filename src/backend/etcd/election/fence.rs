//! The election's fence: what makes a write conditional on a leadership
//! (the leader's key exists with the token as its create revision, and no
//! candidate is older).

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, TxnOp};

use super::EtcdElection;
use crate::client::FencingToken;
use crate::etcd::fence::Fence;
use crate::etcd::prefix_end;

impl EtcdElection {
    /// The fence of a write with `token`: `None` unless this candidate
    /// leads with `token` now (before its local deadline).
    pub(in crate::backend::etcd) fn fence(&self, token: FencingToken) -> Option<Fence> {
        if self.token() != Some(token) {
            return None;
        }
        let key = self.inner.candidacy.lock().as_ref()?.key.clone();
        let created = super::super::fence::revision_of(token)?;
        let prefix = &self.inner.prefix;
        let oldest = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        Some(Fence::new(
            token,
            vec![
                Compare::create_revision(key.clone(), CompareOp::Equal, created),
                Compare::create_revision(prefix.clone(), CompareOp::Greater, created - 1)
                    .with_range(prefix_end(prefix)),
            ],
            vec![
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(prefix.clone(), Some(oldest)),
            ],
        ))
    }
}
