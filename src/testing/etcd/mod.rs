//! A real etcd for tests: [`EtcdServer`] starts the `etcd` binary as a
//! child process on free 127.0.0.1 ports with a private temporary data
//! directory, waits until it serves, and kills it when dropped (also when a
//! test panics). It is started by the same launcher as the etcd of
//! `testing::kube`'s control plane; its errors are
//! [`HarnessError`](super::HarnessError)s. A [`Proxy`](super::Proxy) between a client and the server
//! can blackhole the traffic, to cut one replica off from etcd.
//!
//! The binary is `$TEND_ETCD_BIN` if set, else `etcd` on the `PATH`. On
//! Debian or Ubuntu: `apt-get install -y etcd-server` (do not start its
//! system service: tests start their own servers).
//!
//! ```no_run
//! use tend::testing::etcd::EtcdServer;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = EtcdServer::start().await?;
//! let mut client = server.client().await?;
//! client.put("greeting", "hello", None).await?;
//! server.kill();             // as a crash
//! server.restart().await?;   // same data dir, same ports
//! # Ok(()) }
//! ```

mod connect;
mod server;

pub use self::connect::connect;
pub use self::server::{EtcdServer, EtcdServerBuilder};
