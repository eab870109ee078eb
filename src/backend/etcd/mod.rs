//! The etcd backend (feature `etcd`): objects stored as JSON under a key
//! prefix, writes with optimistic concurrency and fencing, leader
//! election and shard membership on etcd leases.
//!
//! # Source
//!
//! An [`EtcdSource`] is a [`Source`](crate::Source) over every key that
//! starts with a prefix. Each value is one object, as JSON; its
//! [`version`](crate::Object::version) is the key's `mod_revision`, so
//! versions are etcd revisions and grow with every write.
//!
//! - [`list`](crate::Source::list) reads the prefix in pages
//!   ([`EtcdSourceBuilder::page_size`]), every page pinned at the first
//!   page's revision: one consistent snapshot, however large.
//! - [`watch(R)`](crate::Source::watch) watches the prefix from `R + 1`
//!   with progress notifications, which become
//!   [`Change::Bookmark`](crate::Change::Bookmark)s.
//! - A compacted revision — reported by etcd as a *cancelled watch response
//!   carrying `compact_revision`*, not as an error — becomes
//!   [`SourceError::Expired`](crate::SourceError::Expired), so the informer
//!   lists again. A list whose pinned revision is compacted mid-way starts
//!   over.
//! - Connection failures and etcd restarts are
//!   [`SourceError::Unavailable`](crate::SourceError::Unavailable): the
//!   informer backs off, reconnects and resumes from its revision.
//!
//! Keys map to [`Object::Key`](crate::Object::Key) through a
//! [`KeyCodec`]; the default, [`TextKeys`], uses the key type's
//! [`EtcdKey`] text (implemented for `String` and
//! [`ObjectKey`](crate::ObjectKey)).
//!
//! ## Bad stored data
//!
//! An entry that cannot be decoded — a key the codec rejects or that is not
//! UTF-8, a value that is not JSON or not of the object's shape, a value
//! larger than [`EtcdSourceBuilder::max_value_bytes`], an object whose own
//! key differs from the etcd key — never stops the source: it is skipped
//! with a [`DecodeError`], counted ([`EtcdSource::decode_errors`]), listed
//! ([`EtcdSource::skipped`]) and logged at `warn`. For tend it does not
//! exist (a watch reports a valid key whose value turned bad as deleted,
//! as a list would), and it is picked up again once a valid value is
//! written.
//!
//! # Writes
//!
//! [`EtcdSource::client`] is a [`Client`](crate::client::Client), the same
//! type as on every backend: it creates, updates and deletes in
//! transactions that compare the stored `mod_revision` first
//! ([`ClientError::Conflict`](crate::client::ClientError::Conflict), nothing
//! written) and, for a client from [`EtcdSource::client_fenced_by`] given a
//! fencing token, the election's leader key or the shard's ownership record
//! ([`ClientError::Fenced`](crate::client::ClientError::Fenced)): a deposed
//! leader's, or a lost shard owner's, late write fails instead of landing.
//!
//! # Leader election
//!
//! [`EtcdElection`] implements the manager's
//! [`LeaderElector`](crate::election::LeaderElector) on an etcd lease, with
//! a [validated](crate::election::ElectionConfig) lease, renew deadline and
//! retry period.
//!
//! # Shard membership
//!
//! [`EtcdMembership`] implements [`Membership`](crate::shard::Membership)
//! on an etcd lease with the same timing and local-deadline rule: a member
//! record per member, an ownership record per owned shard (created only if
//! absent, bound to the member's lease), the shard's token its create
//! revision.
//!
//! # Example
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use tend::etcd::EtcdSource;
//! use tend::{Informer, Object, Revision};
//!
//! #[derive(Clone, Debug, Serialize, Deserialize)]
//! struct Pod {
//!     name: String,
//!     node: String,
//!     #[serde(skip)]
//!     version: Revision,
//! }
//!
//! impl Object for Pod {
//!     type Key = String;
//!     fn key(&self) -> String { self.name.clone() }
//!     fn version(&self) -> Revision { self.version }
//!     fn set_version(&mut self, version: Revision) { self.version = version; }
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = etcd_client::Client::connect(["http://127.0.0.1:2379"], None).await?;
//! let pods = EtcdSource::<Pod>::builder("pods", client, "/demo/pods/").build();
//! let client = pods.client();
//! let pod = Pod { name: "web-1".into(), node: "node-0".into(), version: Revision::ZERO };
//! let pod = client.create(pod).await?;
//! let informer = Informer::builder(pods).build()?;
//! # drop((pod, informer)); Ok(()) }
//! ```

mod client;
mod codec;
mod election;
mod fence;
mod lease;
mod membership;
mod source;
mod watch;

pub use self::codec::{DecodeError, EncodeError, EtcdKey, EtcdObject, KeyCodec, TextKeys};
pub use self::election::{ElectionBuildError, EtcdElection, EtcdElectionBuilder};
pub use self::fence::FenceAuthority;
pub use self::membership::{EtcdMembership, EtcdMembershipBuilder, MembershipBuildError};
pub use self::source::{
    DEFAULT_MAX_VALUE_BYTES, DEFAULT_PAGE_SIZE, DEFAULT_REQUEST_TIMEOUT, EtcdSource,
    EtcdSourceBuilder, SkippedEntry,
};
pub use etcd_client;

/// The largest gRPC message decoded (tonic's default of 4 MiB is too small
/// for a page of large values).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// The first key of the range of everything under `prefix` (etcd refuses
/// an empty key).
fn range_start(prefix: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        vec![0]
    } else {
        prefix.to_vec()
    }
}

/// The end of the key range of everything under `prefix` (`"\0"`, every key,
/// for an empty or all-`0xff` prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff]), [0]);
        assert_eq!(prefix_end(b""), [0]);
    }
}
