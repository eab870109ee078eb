//! `connect`: an etcd client that notices a dead server within seconds.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::testing::HarnessError;

/// A client of `endpoint` (e.g. a [`Proxy`](crate::testing::Proxy)'s) with short
/// connect and keep-alive timeouts, so that a dead or cut-off server is
/// noticed within seconds.
///
/// # Errors
///
/// [`HarnessError::EtcdClient`] when connecting fails.
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn connect(endpoint: &str) -> Result<Client, HarnessError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Client::connect([endpoint], Some(options))
        .await
        .map_err(HarnessError::EtcdClient)
}
