//! Bounded waits for tests: each fails the test naming what it waited for.

#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::future::Future;
use std::time::Duration;

/// Polls `condition` every 10 ms (of tokio's clock) until it holds, failing
/// the test naming `what` after `limit`.
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

/// Awaits `future`, failing the test naming `what` after `limit`.
pub async fn within<T>(what: &str, limit: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}
