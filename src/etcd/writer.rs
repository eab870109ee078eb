//! `EtcdWriter`: create, update and delete with optimistic concurrency and
//! fencing.

use std::fmt;
use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{EncodeError, revision};
use super::election::{EtcdElection, Fence};
use super::source::Shared;
use crate::source::{Object, Revision};

/// Why a write was refused or failed. When it was refused, nothing was
/// written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The object is stored at another version than the one given: someone
    /// else wrote it since it was read.
    #[error("`{key}` changed since version {expected} (now {actual})")]
    Conflict {
        /// The etcd key.
        key: String,
        /// The version the write expected.
        expected: Revision,
        /// The version stored now.
        actual: Revision,
    },
    /// A create found the key taken.
    #[error("`{key}` already exists")]
    AlreadyExists {
        /// The etcd key.
        key: String,
    },
    /// An update or delete found no object.
    #[error("`{key}` does not exist")]
    NotFound {
        /// The etcd key.
        key: String,
    },
    /// The write carried a fencing token that is not the leader's now:
    /// this replica was deposed, or its local deadline passed (it may not
    /// act as the leader any more, even while its lease lives).
    #[error("fencing token {token} is no longer the leader's")]
    Fenced {
        /// The stale token.
        token: u64,
    },
    /// A fencing token was given to a writer without an election (see
    /// [`EtcdWriter::fenced_by`]).
    #[error("a fencing token was given to a writer without an election")]
    NoElection,
    /// The object's key has no etcd form (see [`KeyCodec`](super::KeyCodec)).
    #[error("object key cannot be stored")]
    Key(#[source] EncodeError),
    /// The object could not be encoded as JSON.
    #[error("object could not be encoded")]
    Encode(#[source] serde_json::Error),
    /// etcd could not be reached, or failed.
    #[error("etcd request failed")]
    Etcd(#[source] etcd_client::Error),
}

/// Writes objects of one [`EtcdSource`](super::EtcdSource) (same prefix,
/// same key codec); from [`EtcdSource::writer`](super::EtcdSource::writer).
///
/// Every write is one etcd transaction that compares before it writes:
///
/// - [`create`](Self::create) only if the key is free;
/// - [`update`](Self::update) and [`delete`](Self::delete) only if the
///   object's [`version`](Object::version) (its etcd `mod_revision`) is
///   still the stored one: a stale write fails with
///   [`WriteError::Conflict`];
/// - with a fencing token (from
///   [`Context::fencing_token`](crate::controller::Context::fencing_token)),
///   only if the election's leader key still exists with that token as its
///   create revision, and no older candidate exists: a deposed leader's
///   write fails with [`WriteError::Fenced`] instead of landing. A write
///   whose token is not [`EtcdElection::token`] now (the local deadline
///   passed, or the leadership ended) fails so without a request.
///
/// Objects are stored as JSON; the version field is set from etcd on every
/// read and write, whatever was serialized.
pub struct EtcdWriter<O: Object> {
    shared: Arc<Shared<O>>,
    election: Option<EtcdElection>,
}

impl<O: Object> Clone for EtcdWriter<O> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            election: self.election.clone(),
        }
    }
}

impl<O: Object> fmt::Debug for EtcdWriter<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdWriter")
            .field("source", &self.shared.name)
            .field("fenced", &self.election.is_some())
            .finish_non_exhaustive()
    }
}

/// A write's comparisons and operation, before fencing.
struct Plan {
    key: Vec<u8>,
    when: Vec<Compare>,
    then: TxnOp,
}

impl<O> EtcdWriter<O>
where
    O: Object + Serialize + DeserializeOwned,
{
    pub(super) fn new(shared: Arc<Shared<O>>) -> Self {
        Self {
            shared,
            election: None,
        }
    }

    /// Checks fencing tokens against `election` (this replica's candidacy).
    #[must_use]
    pub fn fenced_by(mut self, election: &EtcdElection) -> Self {
        self.election = Some(election.clone());
        self
    }

    /// Stores a new object; returns it with its version set.
    ///
    /// # Errors
    ///
    /// [`WriteError::AlreadyExists`], [`WriteError::Fenced`],
    /// [`WriteError::NoElection`], [`WriteError::Key`],
    /// [`WriteError::Encode`] or [`WriteError::Etcd`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn create(&self, object: &O, token: Option<u64>) -> Result<O, WriteError> {
        let key = self
            .shared
            .etcd_key(&object.key())
            .map_err(WriteError::Key)?;
        let value = serde_json::to_vec(object).map_err(WriteError::Encode)?;
        let plan = Plan {
            when: vec![Compare::version(key.clone(), CompareOp::Equal, 0)],
            then: TxnOp::put(key.clone(), value, None::<PutOptions>),
            key,
        };
        let written = self.run(plan, token, None).await?;
        let mut stored = object.clone();
        stored.set_version(written);
        Ok(stored)
    }

    /// Replaces a stored object provided its version is `object.version()`;
    /// returns it with its new version set.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotFound`], [`WriteError::Conflict`],
    /// [`WriteError::Fenced`], [`WriteError::NoElection`],
    /// [`WriteError::Key`], [`WriteError::Encode`] or [`WriteError::Etcd`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn update(&self, object: &O, token: Option<u64>) -> Result<O, WriteError> {
        let key = self
            .shared
            .etcd_key(&object.key())
            .map_err(WriteError::Key)?;
        let value = serde_json::to_vec(object).map_err(WriteError::Encode)?;
        let expected = version(object.version());
        let plan = Plan {
            when: exists_at(&key, expected),
            then: TxnOp::put(key.clone(), value, None::<PutOptions>),
            key,
        };
        let written = self.run(plan, token, Some(object.version())).await?;
        let mut stored = object.clone();
        stored.set_version(written);
        Ok(stored)
    }

    /// Deletes a stored object provided its version is `object.version()`.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotFound`], [`WriteError::Conflict`],
    /// [`WriteError::Fenced`], [`WriteError::NoElection`],
    /// [`WriteError::Key`] or [`WriteError::Etcd`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have deleted the object.
    pub async fn delete(&self, object: &O, token: Option<u64>) -> Result<(), WriteError> {
        let key = self
            .shared
            .etcd_key(&object.key())
            .map_err(WriteError::Key)?;
        let expected = version(object.version());
        let plan = Plan {
            when: exists_at(&key, expected),
            then: TxnOp::delete(key.clone(), None),
            key,
        };
        self.run(plan, token, Some(object.version()))
            .await
            .map(drop)
    }

    /// Deletes the object stored under `key`, whatever its version.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotFound`], [`WriteError::Fenced`],
    /// [`WriteError::NoElection`], [`WriteError::Key`] or
    /// [`WriteError::Etcd`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have deleted the object.
    pub async fn delete_key(&self, key: &O::Key, token: Option<u64>) -> Result<(), WriteError> {
        let key = self.shared.etcd_key(key).map_err(WriteError::Key)?;
        let plan = Plan {
            when: vec![Compare::version(key.clone(), CompareOp::Greater, 0)],
            then: TxnOp::delete(key.clone(), None),
            key,
        };
        self.run(plan, token, None).await.map(drop)
    }

    /// Runs a plan with the fence's comparisons; returns the revision of the
    /// write or says why it was refused.
    async fn run(
        &self,
        mut plan: Plan,
        token: Option<u64>,
        expected: Option<Revision>,
    ) -> Result<Revision, WriteError> {
        let mut reads = vec![TxnOp::get(plan.key.clone(), None::<GetOptions>)];
        let fence = match token {
            None => None,
            Some(token) => {
                let election = self.election.as_ref().ok_or(WriteError::NoElection)?;
                // Refused here, before any request, once the local deadline
                // passed or the leadership ended.
                let fence = election.fence(token).ok_or(WriteError::Fenced { token })?;
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
            .map_err(WriteError::Etcd)?;
        if response.succeeded() {
            return Ok(revision(response.header().map_or(0, |h| h.revision())));
        }
        Err(refusal(&plan.key, &response, fence.as_ref(), expected))
    }
}

/// Why a transaction's comparisons failed, from its `or_else` reads (the
/// key's, then the fence's) at the revision it was refused at.
fn refusal(
    key: &[u8],
    response: &TxnResponse,
    fence: Option<&Fence>,
    expected: Option<Revision>,
) -> WriteError {
    let mut reads = response.op_responses();
    let fence_reads = reads.split_off(1.min(reads.len()));
    if let Some(fence) = fence {
        if !fence.held(&fence_reads) {
            return WriteError::Fenced {
                token: fence.token(),
            };
        }
    }
    let stored = reads.into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get.kvs().first().map(|kv| kv.mod_revision())),
        _ => None,
    });
    let name = String::from_utf8_lossy(key).into_owned();
    match (stored.flatten(), expected) {
        (None, _) => WriteError::NotFound { key: name },
        (Some(_), None) => WriteError::AlreadyExists { key: name },
        (Some(actual), Some(expected)) => WriteError::Conflict {
            key: name,
            expected,
            actual: revision(actual),
        },
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
