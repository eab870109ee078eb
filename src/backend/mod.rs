//! The backends: each implements [`Source`](crate::Source) and, where it
//! can be written to, [`Backend`](crate::client::Backend); where it has
//! them, a [`LeaderElector`](crate::election::LeaderElector) and a
//! [`Membership`](crate::shard::Membership).
//!
//! Every backend's folder has the same shape: `source.rs`, `client.rs`,
//! `election` and `membership` (a file or a folder), named alike. They sit
//! above the client, elections and shards, and below the controller.

#[cfg(feature = "dir")]
pub mod dir;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "kube")]
pub mod kube;
pub mod memory;
pub mod poll;
