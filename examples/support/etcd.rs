//! What the etcd examples share: their command line (`--embedded`,
//! `--endpoint URL`, `--duration SECONDS`) and the etcd it names.

use std::time::Duration;

use tend::BoxError;
use tend::testing::etcd::EtcdServer;

/// The value after `flag` on the command line.
pub(crate) fn arg(flag: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != flag);
    args.next()?;
    args.next()
}

/// `--duration SECONDS` in whole seconds, or `default` (also when it does
/// not parse).
pub(crate) fn duration_or(default: Duration) -> Duration {
    let secs = arg("--duration").and_then(|d| d.parse().ok());
    secs.map_or(default, Duration::from_secs)
}

/// The etcd an example talks to: one it starts on loopback (`--embedded`),
/// else `--endpoint URL` (default `http://127.0.0.1:2379`).
#[derive(Debug)]
pub(crate) struct Etcd {
    /// Held for the run: dropping it stops the server.
    _server: Option<EtcdServer>,
    pub(crate) endpoint: String,
}

impl Etcd {
    pub(crate) async fn from_args() -> Result<Self, BoxError> {
        let server = if std::env::args().any(|a| a == "--embedded") {
            Some(EtcdServer::start().await?)
        } else {
            None
        };
        let endpoint = server.as_ref().map_or_else(
            || arg("--endpoint").unwrap_or_else(|| "http://127.0.0.1:2379".into()),
            EtcdServer::endpoint,
        );
        Ok(Self {
            _server: server,
            endpoint,
        })
    }
}
