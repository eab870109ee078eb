//! Shared helpers for the etcd tests: a JSON object type, bounded waits and
//! a running informer.

#![allow(dead_code, unreachable_pub)]

#[path = "wait.rs"]
mod wait;
#[allow(unused_imports)] // each test binary uses a different subset
pub use wait::{eventually, within};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tend::etcd::{EtcdSource, etcd_client};
use tend::testing::Proxy;
use tend::testing::etcd::{EtcdServer, connect};
use tend::{Informer, Revision};
use tokio_util::sync::CancellationToken;

/// A small object stored as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub name: String,
    pub value: u64,
    #[serde(skip)]
    pub version: Revision,
}

impl Item {
    pub fn new(name: impl Into<String>, value: u64) -> Self {
        Self {
            name: name.into(),
            value,
            version: Revision::ZERO,
        }
    }
}

tend::impl_object!(Item, key: name: String, version: version);

pub const PREFIX: &str = "/test/items/";

/// The JSON of an item, as stored.
pub fn json(name: &str, value: u64) -> String {
    serde_json::to_string(&Item::new(name, value)).unwrap()
}

/// Starts etcd, with fast progress notifications.
pub async fn server() -> EtcdServer {
    within(
        "etcd to start",
        Duration::from_secs(30),
        EtcdServer::builder()
            .arg("--experimental-watch-progress-notify-interval=500ms")
            .start(),
    )
    .await
    .expect("etcd starts (is etcd-server installed?)")
}

pub async fn client(server: &EtcdServer) -> etcd_client::Client {
    within("an etcd client", Duration::from_secs(10), server.client())
        .await
        .expect("client connects")
}

/// A proxy in front of `server` (to cut it off on demand) and a client
/// connected through it.
pub async fn through_proxy(server: &EtcdServer) -> (Proxy, etcd_client::Client) {
    let proxy = Proxy::start(server.address()).await.unwrap();
    let client = within(
        "a client through the proxy",
        Duration::from_secs(10),
        connect(&proxy.endpoint()),
    )
    .await
    .unwrap();
    (proxy, client)
}

pub fn source(client: etcd_client::Client) -> EtcdSource<Item> {
    EtcdSource::builder("items", client, PREFIX)
        .request_timeout(Duration::from_secs(3))
        .build()
}

/// An informer over `source`, running until the returned token is
/// cancelled (or the handle dropped).
pub struct Running {
    pub informer: Informer<Item>,
    pub cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

pub async fn run_informer(source: EtcdSource<Item>) -> Running {
    let informer = Informer::builder(source)
        .backoff(
            Duration::from_millis(50),
            Duration::from_millis(500),
            Duration::from_secs(5),
        )
        .max_watch_failures(std::num::NonZeroU32::new(100).unwrap())
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let informer = informer.clone();
        let cancel = cancel.clone();
        async move {
            let _ = informer.run(cancel).await;
        }
    });
    within(
        "the informer to sync",
        Duration::from_secs(10),
        informer.wait_synced(Duration::from_secs(10)),
    )
    .await
    .expect("informer syncs");
    Running {
        informer,
        cancel,
        task,
    }
}

/// The cached value of every item, sorted by name.
pub fn cached(informer: &Informer<Item>) -> Vec<(String, u64)> {
    let mut items: Vec<_> = informer
        .cache()
        .list()
        .iter()
        .map(|i| (i.name.clone(), i.value))
        .collect();
    items.sort();
    items
}
