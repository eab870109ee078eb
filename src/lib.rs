//! tend: a controller runtime for level-triggered reconciliation loops.
//!
//! A reconciliation loop declares a destination and stays responsible for it:
//! **observe** the actual state, **compare** it with the desired state, **act**
//! to close the gap, and repeat forever. Because every decision is taken from
//! the state as it is now (not from the event that woke the loop), a dropped or
//! duplicated event, a crash or a restart changes nothing: the next reconcile
//! sees the world as it is and fixes it.
//!
//! The crate is built from small parts, each in its own module:
//!
//! - [`Object`] and [`Source`]: what a controller observes and where it
//!   comes from, with the embedded [`memory`] backend (revisions, optimistic
//!   concurrency, watch history, compaction, fault injection) and the
//!   list-only [`poll`] backend.
//! - [`client`]: the [`Client`](client::Client) that reads and writes a
//!   source's objects, the same on every backend, with optimistic
//!   concurrency, fencing and read-modify-write helpers.
//! - [`Informer`]: lists and watches a source, keeps the shared [`Store`]
//!   cache up to date and delivers [`Event`]s to subscribers.
//! - [`WorkQueue`]: the deduplicating, rate-limited, prioritised queue of keys
//!   that every controller runs on.
//! - [`rate_limit`]: per-key backoff and overall rate limits for retries.
//! - [`testing`]: a harness that runs your controllers in tests until they
//!   settle.
//! - [`controller`]: the [`Reconciler`](controller::Reconciler) trait you
//!   implement and the [`Controller`](controller::Controller) that runs it.
//! - [`manager`]: the [`Manager`](manager::Manager) that runs several
//!   controllers with shared informers, leader election, Prometheus metrics
//!   and health endpoints (`/metrics`, `/healthz`, `/readyz` with the `http`
//!   feature, on by default).
//! - [`shard`]: the stable mapping of keys to shards and of shards to
//!   replicas, for running one controller on several replicas.
//! - [`dir`] (feature `dir`): a source over a directory of JSON (or any
//!   decodable) files, one object per file, watched with OS file
//!   notifications: the desired state of a GitOps tool.
//! - [`etcd`] (feature `etcd`): a source over a key prefix in etcd, writes
//!   with optimistic concurrency and fencing, and leader election on an
//!   etcd lease; [`testing::etcd`] starts a real etcd for tests.

pub mod client;
pub mod controller;
mod election;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod gc;
mod informer;
mod key;
pub mod manager;
mod queue;
pub mod shard;
mod source;
mod sync;
pub mod testing;
mod time;

/// The attribute that [`Source`] implementations need (`#[tend::async_trait]`),
/// re-exported so that implementing tend's traits needs no extra dependency.
pub use async_trait::async_trait;
pub use informer::{
    Event, IndexValue, Informer, InformerBuilder, InformerError, InformerStats, Store, Subscription,
};
pub use key::QueueKey;
pub use queue::{
    DoneError, InFlightKey, Priority, QueueObserver, QueueStats, WorkQueue, WorkQueueBuilder,
    rate_limit,
};
/// The token every `run` takes to stop (tokio-util's), re-exported.
pub use tokio_util::sync::CancellationToken;

#[cfg(feature = "dir")]
pub use source::dir;
pub use source::{
    BoxError, Change, Deletion, Lifecycle, Object, ObjectKey, Revision, Snapshot, Source,
    SourceError, WatchStream, memory, poll,
};
