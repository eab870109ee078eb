//! The control plane's etcd: a plain process, probed and compacted through
//! its JSON gateway over HTTP (no etcd client, so no `etcd` feature).

use std::ffi::OsString;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::KubeHarnessError;
use super::process::{Process, free_port};

/// How many times etcd is started on new ports when it exits early (its
/// port was taken in the meantime) or another etcd answers there.
const START_ATTEMPTS: u32 = 5;

/// How long one request to etcd may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a response that is read (etcd's answers here are tiny).
const MAX_RESPONSE: u64 = 1 << 20;

/// A running single-member etcd on loopback.
#[derive(Debug)]
pub(super) struct Etcd {
    process: Process,
    address: SocketAddr,
    name: String,
}

impl Etcd {
    /// Starts etcd named `name` with its data in `dir`, on free ports, and
    /// waits until it serves, for at most `budget` from `started`.
    pub(super) async fn start(
        binary: &Path,
        dir: &Path,
        name: &str,
        (started, budget): (Instant, Duration),
    ) -> Result<Self, KubeHarnessError> {
        let data_dir = dir.join("etcd");
        let mut attempt = 1;
        loop {
            let (client, address) = free_port()?;
            let (peer, peer_address) = free_port()?;
            let etcd = Self {
                process: Process::new("etcd", binary.to_owned(), dir.join("etcd.log")),
                address,
                name: name.to_owned(),
            };
            fresh_data_dir(&data_dir)?;
            drop((client, peer));
            etcd.process.spawn(&etcd.args(&data_dir, peer_address))?;
            match etcd.wait_healthy(started, budget).await {
                Ok(()) => return Ok(etcd),
                Err(error) if attempt < START_ATTEMPTS && etcd.lost_its_ports(&error) => {
                    tracing::debug!(%error, attempt, "etcd did not start, trying new ports");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Whether a failed start is worth trying again on new ports: etcd
    /// exited (its port was taken once released), or another etcd answered.
    fn lost_its_ports(&self, error: &KubeHarnessError) -> bool {
        match error {
            KubeHarnessError::Etcd { .. } => true,
            KubeHarnessError::Unhealthy { .. } => !self.process.is_running(),
            _ => false,
        }
    }

    /// The client URL, `http://127.0.0.1:{port}`.
    pub(super) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The process's id while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Kills etcd.
    pub(super) fn kill(&self) {
        self.process.kill();
    }

    /// Kills etcd unless another thread holds it (at process exit).
    pub(super) fn try_kill(&self) {
        self.process.try_kill();
    }

    /// etcd's current revision.
    pub(super) async fn revision(&self) -> Result<u64, KubeHarnessError> {
        // Any key will do: the header carries the store's revision.
        let answer = self
            .post("range", "/v3/kv/range", &json!({ "key": "dGVuZA==" }))
            .await?;
        answer["header"]["revision"]
            .as_str()
            .and_then(|revision| revision.parse().ok())
            .ok_or_else(|| KubeHarnessError::Etcd {
                request: "range",
                detail: format!("no revision in its answer {answer}"),
            })
    }

    /// Compacts etcd's history up to `revision`, physically (so that it is
    /// gone once this returns). A revision compacted already is no error.
    pub(super) async fn compact(&self, revision: u64) -> Result<(), KubeHarnessError> {
        let body = json!({ "revision": revision.to_string(), "physical": true });
        match self.post("compaction", "/v3/kv/compaction", &body).await {
            Err(KubeHarnessError::Etcd { detail, .. }) if detail.contains("has been compacted") => {
                Ok(())
            }
            answer => answer.map(drop),
        }
    }

    fn args(&self, data_dir: &Path, peer: SocketAddr) -> Vec<OsString> {
        let url = self.url();
        [
            format!("--name={}", self.name),
            format!("--initial-cluster-token={}-cluster", self.name),
            format!("--data-dir={}", data_dir.display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls=http://{peer}"),
            format!("--initial-advertise-peer-urls=http://{peer}"),
            format!("--initial-cluster={}=http://{peer}", self.name),
        ]
        .into_iter()
        .map(OsString::from)
        .collect()
    }

    /// Probes until etcd serves as this member, the process exits, or the
    /// budget is spent (real time: see [`runtime`](super::runtime)).
    async fn wait_healthy(
        &self,
        started: Instant,
        budget: Duration,
    ) -> Result<(), KubeHarnessError> {
        while started.elapsed() < budget && self.process.is_running() {
            if let Ok(healthy) = self.probe().await {
                return if healthy {
                    Ok(())
                } else {
                    Err(KubeHarnessError::Etcd {
                        request: "member list",
                        detail: format!("another etcd answers on {}", self.address),
                    })
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(self.process.unhealthy(started.elapsed()))
    }

    /// Whether etcd is healthy and is this member (`Err` while it is not
    /// serving yet).
    async fn probe(&self) -> Result<bool, KubeHarnessError> {
        let (status, body) =
            request(self.address, "GET", "/health", "")
                .await
                .map_err(|error| KubeHarnessError::Etcd {
                    request: "health",
                    detail: error.to_string(),
                })?;
        let health: Value = serde_json::from_str(&body).unwrap_or_default();
        if status != 200 || health["health"] != "true" {
            return Err(KubeHarnessError::Etcd {
                request: "health",
                detail: format!("status {status}: {body}"),
            });
        }
        let members = self
            .post("member list", "/v3/cluster/member/list", &json!({}))
            .await?;
        let ours = members["members"]
            .as_array()
            .is_some_and(|members| members.iter().any(|member| member["name"] == *self.name));
        Ok(ours)
    }

    /// POSTs `body` to etcd's gateway at `path`; its JSON answer, or an
    /// [`Etcd`](KubeHarnessError::Etcd) error naming `request`.
    async fn post(
        &self,
        request_name: &'static str,
        path: &str,
        body: &Value,
    ) -> Result<Value, KubeHarnessError> {
        let failed = |detail: String| KubeHarnessError::Etcd {
            request: request_name,
            detail,
        };
        let (status, answer) = request(self.address, "POST", path, &body.to_string())
            .await
            .map_err(|error| failed(error.to_string()))?;
        if status != 200 {
            return Err(failed(format!("status {status}: {answer}")));
        }
        serde_json::from_str(&answer).map_err(|error| failed(format!("{error}: {answer}")))
    }
}

/// One HTTP/1.0 exchange: the server closes the connection after its
/// response, so the body is the rest of the stream (no chunking, no
/// keep-alive). Returns the status and the body.
async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {address}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut response = Vec::new();
        stream.take(MAX_RESPONSE).read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange).await??;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head}")))?;
    Ok((status, body.to_owned()))
}

/// An empty data directory at `path` (mode 0700), replacing what a failed
/// start left there.
fn fresh_data_dir(path: &Path) -> Result<(), KubeHarnessError> {
    let doing = "making etcd's data directory";
    if path.exists() {
        fs::remove_dir_all(path).map_err(KubeHarnessError::io(doing))?;
    }
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path).map_err(KubeHarnessError::io(doing))
}
