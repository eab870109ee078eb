//! etcd's JSON gateway over plain HTTP: what the launcher probes health
//! with, and the kube harness compacts with, without an etcd client (so
//! without the `etcd` feature).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::HarnessError;

/// How long one request to etcd may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a response that is read (etcd's answers here are tiny).
const MAX_RESPONSE: u64 = 1 << 20;

/// Whether etcd at `address` answers `GET /health` with 200 and
/// `"health": "true"`.
///
/// # Errors
///
/// [`HarnessError::EtcdRequest`] when it does not.
pub(crate) async fn health(address: SocketAddr) -> Result<(), HarnessError> {
    let failed = |detail: String| HarnessError::EtcdRequest {
        request: "health",
        detail,
    };
    let (status, body) = exchange(address, "GET", "/health", "")
        .await
        .map_err(|error| failed(error.to_string()))?;
    let health: Value = serde_json::from_str(&body).unwrap_or_default();
    if status != 200 || health["health"] != "true" {
        return Err(failed(format!("status {status}: {body}")));
    }
    Ok(())
}

/// POSTs `body` to etcd's gateway at `path`, and returns its JSON answer.
///
/// # Errors
///
/// [`HarnessError::EtcdRequest`] naming `request` when the exchange
/// fails, or its status is not 200, or its answer no JSON.
pub(crate) async fn post(
    address: SocketAddr,
    request: &'static str,
    path: &str,
    body: &Value,
) -> Result<Value, HarnessError> {
    let failed = |detail: String| HarnessError::EtcdRequest { request, detail };
    let (status, answer) = exchange(address, "POST", path, &body.to_string())
        .await
        .map_err(|error| failed(error.to_string()))?;
    if status != 200 {
        return Err(failed(format!("status {status}: {answer}")));
    }
    serde_json::from_str(&answer).map_err(|error| failed(format!("{error}: {answer}")))
}

/// One HTTP/1.0 exchange: the server closes the connection after its
/// response, so the body is the rest of the stream (no chunking, no
/// keep-alive). Returns the status and the body.
async fn exchange(
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
