//! Helpers of the browser tests: chromedriver started on a free loopback
//! port, and a headless Chromium session on it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::process::{Child, Command};

/// How long chromedriver and Chromium get to start.
const START: Duration = Duration::from_secs(30);

/// A chromedriver process, killed when dropped.
pub struct Driver {
    child: Child,
    address: SocketAddr,
}

impl Driver {
    /// Starts `chromedriver` (from `TEND_CHROMEDRIVER`, or on the `PATH`) on
    /// a free loopback port and waits until it answers.
    ///
    /// # Panics
    ///
    /// When it is not installed, or does not answer within 30 s.
    pub async fn start() -> Self {
        let program = std::env::var("TEND_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        // A port free now; chromedriver cannot be given port 0.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let child = Command::new(&program)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("starting `{program}` failed ({error}): install chromium-driver")
            });
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let started = tokio::time::Instant::now();
        while tokio::net::TcpStream::connect(address).await.is_err() {
            assert!(
                started.elapsed() < START,
                "chromedriver did not listen within {START:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { child, address }
    }

    /// A new headless Chromium session of `width` × `height` pixels.
    ///
    /// # Panics
    ///
    /// When Chromium does not start.
    pub async fn browser(&self, width: u32, height: u32) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    format!("--window-size={width},{height}"),
                ]
            }),
        );
        // WebDriver on loopback: plain HTTP, no TLS.
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let url = format!("http://{}", self.address);
        let connect = builder.connect(&url);
        match tokio::time::timeout(START, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => panic!("starting headless Chromium failed: {error}"),
            Err(_) => panic!("headless Chromium did not start within {START:?}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
