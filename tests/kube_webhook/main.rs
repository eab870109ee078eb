//! Webhooks called by a real API server (`tend::testing::kube`): a
//! denied create, a mutation, a conversion between two versions of a CRD,
//! the failure policy when the server is down or a handler panics or is
//! slow, certificate rotation without a restart, and bad input answered
//! `400` over TLS.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`). Real time: the API server takes a moment to use
//! a new webhook configuration, so each test polls a probe object until
//! the configuration acts, within a bound.

#![cfg(feature = "webhook")]

#[path = "../support/wait.rs"]
mod wait;

mod admission;
mod bad_input;
mod certs;
mod configs;
mod conversion;
mod failure_policy;
mod rotation;
mod server;
mod tls_client;

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tend::testing::kube::ControlPlane;
use tend::webhook::{WebhookError, WebhookServer, WebhookServerBuilder};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use wait::within;

/// The bound of one call to the API server.
const LIMIT: Duration = Duration::from_secs(30);

/// The bound of a wait for the API server to act on a new configuration.
const TAKES_EFFECT: Duration = Duration::from_secs(30);

/// This binary's shared control plane.
async fn plane() -> &'static ControlPlane {
    within(
        "the shared control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .unwrap_or_else(|error| panic!("the shared control plane starts: {error}"))
}

/// A client and a fresh namespace on the shared plane.
async fn setup(prefix: &str) -> (kube::Client, String) {
    let plane = plane().await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    (client, namespace)
}

/// A running server, its metrics, and how to stop it.
#[derive(Debug)]
struct Served {
    address: SocketAddr,
    registry: Registry,
    stop: CancellationToken,
    task: JoinHandle<Result<(), WebhookError>>,
}

impl Served {
    /// Builds the server `builder` describes (on 127.0.0.1:0) and runs it.
    fn start(builder: WebhookServerBuilder) -> Self {
        let mut registry = Registry::default();
        let server: WebhookServer = builder
            .metrics(&mut registry)
            .build()
            .expect("the webhook server builds");
        let address = server.local_addr();
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.run(stop.clone()));
        Self {
            address,
            registry,
            stop,
            task,
        }
    }

    /// `https://127.0.0.1:{port}{path}`.
    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    /// The metrics as Prometheus text.
    fn metrics(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("metrics encode");
        text
    }

    /// The value of the sample `series` (name and labels as printed), 0
    /// when absent.
    fn sample(&self, series: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().expect("a number"))
    }

    /// Stops the server and waits until it stopped.
    async fn stop(self) {
        self.stop.cancel();
        within("the webhook server to stop", LIMIT, self.task)
            .await
            .expect("the server task did not panic")
            .expect("the server ran without error");
    }
}
