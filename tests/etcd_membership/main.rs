//! The etcd membership against a real etcd on loopback: the shared suite
//! (`support/membership_suite.rs`, also run in process), a dead member's
//! shards taken over at lease expiry, a member cut off from etcd stopping
//! at its local deadline, shard tokens fencing writes in etcd itself, and
//! random runs with at most one owner per shard.

#![cfg(feature = "etcd")]

#[path = "../support/etcd.rs"]
mod support;

#[path = "../support/membership_suite.rs"]
mod membership_suite;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tend::client::{ClientError, Fencing, FencingToken};
use tend::election::ElectionConfig;
use tend::etcd::etcd_client::{Client, GetOptions};
use tend::etcd::{EtcdMembership, MembershipBuildError};
use tend::shard::{Membership, MembershipError};
use tokio::time::Instant;

use membership_suite::{four, shard};
use support::{Item, client, server, source, through_proxy, within};

mod acquires;
mod members;
mod random;

const LIMIT: Duration = Duration::from_secs(10);

/// Short timings: lease 2 s (etcd's minimum), renew deadline 1.5 s, retry
/// period 0.5 s.
fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn member(client: Client, prefix: &str, id: &str) -> EtcdMembership {
    EtcdMembership::builder(client, "workers", id, four())
        .prefix(prefix)
        .config(fast())
        .build()
        .expect("a valid member")
}
