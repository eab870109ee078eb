//! The etcd backend of [`Client`]: reads, and writes in one transaction
//! each, with optimistic concurrency and fencing.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::codec::{EtcdObject, decode_value, revision};
use super::fence::{Fence, FenceAuthority};
use super::source::{EtcdSource, Shared};
use crate::client::FencingToken;
use crate::client::{self, Backend, Client, ClientError, Delete, Update};
use crate::object::{Object, Revision};
use crate::source::{Snapshot, Source};

impl<O> EtcdSource<O>
where
    O: EtcdObject,
{
    /// A [`Client`] over this source's objects (same prefix, same codec),
    /// without a fencing authority: a [`fenced`](Client::fenced) handle's
    /// writes fail with [`ClientError::NoFencing`].
    ///
    /// Every write is one etcd transaction that compares before it writes:
    /// a create only if the key is free, an update or a versioned delete
    /// only if the object's [`version`](Object::version) (its etcd
    /// `mod_revision`) is still the stored one. Objects are stored as JSON;
    /// the version is set from etcd on every read and write, whatever was
    /// serialized. A value larger than the source's
    /// [`max_value_bytes`](super::EtcdSourceBuilder::max_value_bytes) is
    /// refused as [`ClientError::Invalid`] (the source would skip it).
    #[must_use]
    pub fn client(&self) -> Client<O> {
        Client::new(EtcdBackend {
            shared: Arc::clone(&self.shared),
            authority: None,
        })
    }

    /// A [`Client`] as [`client`](Self::client) whose
    /// [`fenced`](Client::fenced) writes are checked, in the write's own
    /// transaction, against `authority`:
    ///
    /// - an [`EtcdElection`](super::EtcdElection) (this replica's
    ///   candidacy): the election's leader key must still exist with the
    ///   token as its create revision, and no older candidate exist;
    /// - an [`EtcdMembership`](super::EtcdMembership) (this replica's
    ///   membership of a sharded group): the ownership record of the shard
    ///   the token was acquired for must still exist with the token as its
    ///   create revision.
    ///
    /// A write with a stale token (a deposed leader's, a lost shard's)
    /// fails with [`ClientError::Fenced`] instead of landing; one whose
    /// token the authority knows to be stale now (its local deadline
    /// passed, the leadership ended, the shard was released) fails so
    /// without a request.
    #[must_use]
    pub fn client_fenced_by(&self, authority: impl Into<FenceAuthority>) -> Client<O> {
        Client::new(EtcdBackend {
            shared: Arc::clone(&self.shared),
            authority: Some(authority.into()),
        })
    }
}

/// An [`EtcdSource`]'s configuration and the authority its fenced writes
/// are checked against.
struct EtcdBackend<O: Object> {
    shared: Arc<Shared<O>>,
    authority: Option<FenceAuthority>,
}

impl<O: Object> fmt::Debug for EtcdBackend<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("source", &self.shared.name)
            .field("fenced", &self.authority.is_some())
            .finish_non_exhaustive()
    }
}

/// A write's comparisons and operation, before fencing.
struct Plan {
    key: Vec<u8>,
    when: Vec<Compare>,
    then: TxnOp,
}

/// A value over the source's limit: it would be skipped when read.
#[derive(Debug, thiserror::Error)]
#[error("value of {size} bytes exceeds the source's limit of {limit} bytes")]
struct TooLarge {
    size: usize,
    limit: usize,
}

#[async_trait]
impl<O> Backend for EtcdBackend<O>
where
    O: EtcdObject,
{
    type Object = O;

    fn fences(&self) -> bool {
        self.authority.is_some()
    }

    fn name(&self) -> &str {
        &self.shared.name
    }

    /// The source's [head](Source::head): the header of a one-key get.
    async fn head(&self) -> Result<Option<Revision>, ClientError> {
        let source = EtcdSource {
            shared: Arc::clone(&self.shared),
        };
        Source::head(&source)
            .await
            .map_err(|error| self.unavailable(error))
    }

    async fn get(&self, key: &O::Key) -> Result<Option<O>, ClientError> {
        let etcd_key = self.etcd_key(key)?;
        let mut kv = self.shared.client.kv_client();
        let response = self
            .shared
            .timed(kv.get(etcd_key, None))
            .await
            .map_err(|error| self.unavailable(error))?;
        let Some(entry) = response.kvs().first() else {
            return Ok(None);
        };
        let limit = self.shared.max_value_bytes;
        decode_value(key, entry.value(), entry.mod_revision(), limit)
            .map(Some)
            .map_err(|error| ClientError::invalid(key, error))
    }

    async fn list(&self) -> Result<Snapshot<O>, ClientError> {
        let source = EtcdSource {
            shared: Arc::clone(&self.shared),
        };
        source.list().await.map_err(|error| self.unavailable(error))
    }

    async fn create(&self, mut object: O, token: Option<FencingToken>) -> Result<O, ClientError> {
        client::created(&mut object);
        let key = self.etcd_key(&object.key())?;
        let value = self.encode(&object)?;
        let plan = Plan {
            when: vec![Compare::version(key.clone(), CompareOp::Equal, 0)],
            then: TxnOp::put(key.clone(), value, None::<PutOptions>),
            key,
        };
        let written = self.run(plan, &object.key(), token, None).await?;
        let mut stored = object;
        stored.set_version(written);
        Ok(stored)
    }

    async fn update(&self, object: O, token: Option<FencingToken>) -> Result<O, ClientError> {
        let key = self.etcd_key(&object.key())?;
        let at = object.version();
        // Types with finalizers: the rules need the stored object; the
        // transaction's compare on its version makes the read and the write
        // one step.
        let stored = match object.finalizer_names() {
            Some(_) => self.stored(&object.key()).await?,
            None => None,
        };
        let update = match stored.filter(|stored| stored.version() == at) {
            Some(stored) => client::updated(&stored, object)?,
            None => Update::Cache(object),
        };
        let (object, then) = match update {
            Update::Cache(object) => {
                let value = self.encode(&object)?;
                (object, TxnOp::put(key.clone(), value, None::<PutOptions>))
            }
            Update::Remove(object) => (object, TxnOp::delete(key.clone(), None)),
        };
        let plan = Plan {
            when: exists_at(&key, version(at)),
            then,
            key,
        };
        let written = self.run(plan, &object.key(), token, Some(at)).await?;
        let mut stored = object;
        stored.set_version(written);
        Ok(stored)
    }

    async fn delete(
        &self,
        key: &O::Key,
        expected: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        // An unversioned delete of an object with finalizers compares the
        // version it read: a write in between is a conflict to read again
        // after, not the caller's.
        for _ in 0..UNVERSIONED_DELETE_ATTEMPTS {
            match self.delete_once(key, expected, token).await {
                Err(error) if error.is_conflict() && expected.is_none() => {}
                deleted => return deleted,
            }
        }
        self.delete_once(key, expected, token).await
    }
}

/// Reads an unversioned delete of an object with finalizers makes before
/// it gives up on a key written to without pause.
const UNVERSIONED_DELETE_ATTEMPTS: u32 = 4;

impl<O> EtcdBackend<O>
where
    O: EtcdObject,
{
    /// One delete: removes the object, or marks it while it has
    /// finalizers (compared at the version read).
    async fn delete_once(
        &self,
        key: &O::Key,
        expected: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        let etcd_key = self.etcd_key(key)?;
        let stored = self.stored(key).await?;
        let stored = stored
            .filter(|s| s.finalizer_names().is_some() && expected.is_none_or(|e| e == s.version()));
        let Some(stored) = stored else {
            let when = match expected {
                Some(expected) => exists_at(&etcd_key, version(expected)),
                None => vec![Compare::version(etcd_key.clone(), CompareOp::Greater, 0)],
            };
            let then = TxnOp::delete(etcd_key.clone(), None);
            let plan = Plan {
                when,
                then,
                key: etcd_key,
            };
            return self.run(plan, key, token, expected).await;
        };
        let at = stored.version();
        let delete = client::deleted(&stored);
        let marked = matches!(delete, Delete::Marked);
        let then = match delete {
            Delete::Remove => TxnOp::delete(etcd_key.clone(), None),
            Delete::Mark(marked) => {
                TxnOp::put(etcd_key.clone(), self.encode(&marked)?, None::<PutOptions>)
            }
            // Nothing to write, but the fence still decides the answer.
            Delete::Marked => TxnOp::get(etcd_key.clone(), None::<GetOptions>),
        };
        let plan = Plan {
            when: exists_at(&etcd_key, version(at)),
            then,
            key: etcd_key,
        };
        let written = self.run(plan, key, token, Some(at)).await?;
        Ok(if marked { at } else { written })
    }

    /// The object stored under `key` for the finalizer rules: `None` when
    /// absent or undecodable (then written over or deleted as before).
    async fn stored(&self, key: &O::Key) -> Result<Option<O>, ClientError> {
        match self.get(key).await {
            Err(ClientError::Invalid { .. }) => Ok(None),
            read => read,
        }
    }

    fn etcd_key(&self, key: &O::Key) -> Result<Vec<u8>, ClientError> {
        self.shared
            .etcd_key(key)
            .map_err(|error| ClientError::invalid(key, error))
    }

    /// The object as JSON, within the source's value limit.
    fn encode(&self, object: &O) -> Result<Vec<u8>, ClientError> {
        let value = serde_json::to_vec(object)
            .map_err(|error| ClientError::invalid(&object.key(), error))?;
        let limit = self.shared.max_value_bytes;
        if value.len() > limit {
            let size = value.len();
            return Err(ClientError::invalid(
                &object.key(),
                TooLarge { size, limit },
            ));
        }
        Ok(value)
    }

    fn unavailable(&self, error: impl Into<crate::error::BoxError>) -> ClientError {
        ClientError::unavailable(&self.shared.name, error)
    }

    /// Runs a plan with the fence's comparisons; returns the revision of the
    /// write or says why it was refused.
    async fn run(
        &self,
        mut plan: Plan,
        key: &O::Key,
        token: Option<FencingToken>,
        expected: Option<Revision>,
    ) -> Result<Revision, ClientError> {
        let mut reads = vec![TxnOp::get(plan.key.clone(), None::<GetOptions>)];
        let fence = match token {
            None => None,
            Some(token) => {
                let authority = self.authority.as_ref().ok_or(ClientError::NoFencing)?;
                // Refused here, before any request, once the local deadline
                // passed or the token's leadership or ownership ended.
                let fence = authority
                    .fence(token)
                    .ok_or(ClientError::Fenced { token })?;
                plan.when.extend(fence.compares.iter().cloned());
                reads.extend(fence.reads.iter().cloned());
                Some(fence)
            }
        };
        let txn = Txn::new()
            .when(plan.when)
            .and_then(vec![plan.then])
            .or_else(reads);
        let mut kv = self.shared.client.kv_client();
        let response = self
            .shared
            .timed(kv.txn(txn))
            .await
            .map_err(|error| self.unavailable(error))?;
        if response.succeeded() {
            return Ok(revision(response.header().map_or(0, |h| h.revision())));
        }
        Err(refusal(key, &response, fence.as_ref(), expected))
    }
}

/// Why a transaction's comparisons failed, from its `or_else` reads (the
/// key's, then the fence's) at the revision it was refused at.
fn refusal<K: fmt::Debug>(
    key: &K,
    response: &TxnResponse,
    fence: Option<&Fence>,
    expected: Option<Revision>,
) -> ClientError {
    let mut reads = response.op_responses();
    let fence_reads = reads.split_off(1.min(reads.len()));
    if let Some(fence) = fence
        && !fence.held(&fence_reads)
    {
        return ClientError::Fenced {
            token: fence.token(),
        };
    }
    let stored = reads.into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get.kvs().first().map(|kv| kv.mod_revision())),
        _ => None,
    });
    match (stored.flatten(), expected) {
        (None, _) => ClientError::not_found(key),
        (Some(_), None) => ClientError::already_exists(key),
        (Some(actual), Some(expected)) => ClientError::conflict(key, expected, revision(actual)),
    }
}

/// The key exists (a missing key's mod revision is 0, which a version of
/// 0 would match) and its mod revision is `expected`.
fn exists_at(key: &[u8], expected: i64) -> Vec<Compare> {
    vec![
        Compare::version(key, CompareOp::Greater, 0),
        Compare::mod_revision(key, CompareOp::Equal, expected),
    ]
}

/// A tend revision as an etcd one.
fn version(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}
