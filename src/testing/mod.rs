//! Helpers for testing controllers built on tend.
//!
//! - [`etcd`] (feature `etcd`): a real etcd server started on loopback for
//!   a test, and a TCP proxy that can cut connections to it.

pub mod etcd;
