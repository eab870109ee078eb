//! The client on etcd against a real server: the shared suite
//! (`support/client_suite.rs`, also run on memory), fencing by an
//! `EtcdElection`, finalizers across a restart and garbage collection
//! (`support/cleanup.rs`, `support/gc.rs`), and the failures only a remote backend has (invalid
//! values, an unreachable server).

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

#[path = "support/client_suite.rs"]
mod suite;

#[path = "support/cleanup.rs"]
mod cleanup;

#[path = "support/gc.rs"]
mod gc;

use std::num::NonZeroUsize;
use std::time::Duration;

use tend::Informer;
use tend::client::{Client, ClientError};
use tend::election::{ElectionConfig, LeaderElector};
use tend::etcd::etcd_client::{self, GetOptions, SortOrder, SortTarget};
use tend::etcd::{EtcdElection, EtcdSource};

use suite::{Item, Volume, item};
use support::{client, server, within};

const LIMIT: Duration = Duration::from_secs(10);
const ELECTION: &str = "client-test";

fn items(kv: etcd_client::Client, prefix: &str) -> EtcdSource<Item> {
    EtcdSource::builder("items", kv, prefix)
        .request_timeout(Duration::from_secs(2))
        .build()
}

fn candidate(kv: etcd_client::Client, identity: &str) -> EtcdElection {
    let config = ElectionConfig::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(500),
    )
    .unwrap();
    EtcdElection::builder(kv, ELECTION)
        .identity(identity)
        .config(config)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_suite_holds_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    suite::run_all(|name| {
        let client: Client<Item> = items(kv.clone(), &format!("/suite/{name}/")).client();
        async move { client }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_suite_holds_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    suite::run_finalizers(|name| {
        let source = EtcdSource::builder("volumes", kv.clone(), format!("/finalizers/{name}/"))
            .request_timeout(Duration::from_secs(2))
            .build();
        let client: Client<Volume> = source.client();
        async move { client }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizers_cleanup_runs_exactly_once_across_a_controller_restart_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let source = EtcdSource::builder("volumes", kv, "/restart/volumes/")
        .request_timeout(Duration::from_secs(2))
        .build();
    let informer = || Informer::builder(source.clone()).build().unwrap();
    let volume = suite::volume("v", &[]);
    cleanup::cleanup_runs_exactly_once_across_a_restart(source.client(), informer, volume, LIMIT)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizers_failing_cleanup_is_retried_until_it_succeeds_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let source = EtcdSource::builder("volumes", kv, "/retried/volumes/")
        .request_timeout(Duration::from_secs(2))
        .build();
    let informer = || Informer::builder(source.clone()).build().unwrap();
    let volume = suite::volume("v", &[]);
    cleanup::a_failing_cleanup_is_retried_until_it_succeeds(
        source.client(),
        informer,
        volume,
        LIMIT,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_replicaset_collects_its_pods_on_etcd() {
    let etcd = server().await;
    let kv = client(&etcd).await;
    let pods = EtcdSource::builder("pods", kv.clone(), "/gc/pods/").build();
    let sets = EtcdSource::builder("sets", kv, "/gc/sets/").build();
    let clients = (pods.client(), sets.client());
    gc::deleting_a_replicaset_collects_its_pods(pods, sets, clients, LIMIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_writes_are_fenced_and_change_nothing_on_etcd() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let a = candidate(client(&etcd).await, "a");
    let b = candidate(client(&etcd).await, "b");
    let source = items(kv.clone(), "/fenced/");
    let stale = within("a to win", LIMIT, a.campaign()).await.unwrap();
    // A's lease ends behind its back (an expiry while it was paused).
    let prefix = format!("tend/elections/{ELECTION}/");
    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let leader = kv.get(prefix, Some(oldest)).await.unwrap();
    let lease = leader.kvs().first().expect("a leader key").lease();
    kv.lease_revoke(lease).await.unwrap();
    let current = within("b to win", LIMIT, b.campaign()).await.unwrap();
    assert!(current > stale);
    suite::a_stale_token_is_fenced_and_changes_nothing(
        source.client_fenced_by(&a).fenced(stale),
        source.client_fenced_by(&b).fenced(current),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_source_could_not_read_back_are_invalid() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let source = EtcdSource::<Item>::builder("items", kv.clone(), "/invalid/")
        .max_value_bytes(NonZeroUsize::new(64).unwrap())
        .build();
    let client = source.client();
    let big = item(&"x".repeat(100), 1);
    let error = client.create(big).await.unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    assert!(!error.is_retryable());
    assert!(
        client.list().await.unwrap().objects.is_empty(),
        "nothing written"
    );
    client.create(item("a", 1)).await.unwrap();
    assert_eq!(client.list().await.unwrap().objects.len(), 1);
    // A stored value that is not an object: `get` says so.
    kv.put("/invalid/bad", "not json", None).await.unwrap();
    let error = client.get(&"bad".to_owned()).await.unwrap_err();
    assert!(matches!(error, ClientError::Invalid { .. }), "{error:?}");
    assert_eq!(client.get(&"a".to_owned()).await.unwrap().unwrap().value, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_and_retryable() {
    let etcd = server().await;
    let client = items(client(&etcd).await, "/down/").client();
    client.create(item("a", 1)).await.unwrap();
    etcd.kill();
    let error = within("a failed read", LIMIT, client.get(&"a".to_owned()))
        .await
        .unwrap_err();
    assert!(error.is_retryable(), "{error:?}");
    assert!(error.to_string().starts_with("backend `items` unavailable"));
    let error = within("a failed write", LIMIT, client.create(item("b", 1)))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::Unavailable { .. }),
        "{error:?}"
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "carries the cause"
    );
    let listed = within("a failed list", LIMIT, client.list()).await;
    assert!(listed.unwrap_err().is_retryable());
}
