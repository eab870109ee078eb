//! A tiny object type and helpers shared by the manager tests.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use tend::Revision;
use tend::memory::MemoryStore;

/// A widget: just a name and a version.
#[derive(Debug, Clone, PartialEq)]
pub struct Widget {
    pub name: String,
    pub version: Revision,
}

tend::impl_object!(Widget, key: name: String, version: version);

/// A store holding widgets with the given names.
pub fn widgets(names: &[&str]) -> MemoryStore<Widget> {
    let store = MemoryStore::new("widgets");
    for name in names {
        store
            .create(Widget {
                name: (*name).to_owned(),
                version: Revision::ZERO,
            })
            .expect("a fresh name");
    }
    store
}

/// Polls `condition` every 10 ms until it holds, panicking with `what`
/// after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(limit, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "timed out after {limit:?} waiting for {what}"
    );
}

/// Awaits `future`, panicking with `what` after `limit`.
pub async fn within<T>(what: &str, limit: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}
