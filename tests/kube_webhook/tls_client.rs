//! A TLS client of the webhook server: which certificate it presents, and
//! raw HTTP/1.1 requests.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto::ring};

use super::{LIMIT, within};

/// A TLS connection to `address` trusting only `ca_der`, or the error of
/// the handshake.
pub(crate) async fn connect(
    address: SocketAddr,
    ca_der: &[u8],
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .expect("the CA is a valid root");
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = within("a TCP connection", LIMIT, TcpStream::connect(address)).await?;
    let name = ServerName::try_from("127.0.0.1").expect("an IP address");
    within(
        "a TLS handshake",
        LIMIT,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
}

/// The leaf certificate (DER) the server presents now.
pub(crate) async fn presented(address: SocketAddr, ca_der: &[u8]) -> Vec<u8> {
    try_presented(address, ca_der)
        .await
        .expect("the handshake succeeds")
}

/// The leaf certificate (DER) the server presents now, or the handshake's
/// error (not signed by `ca_der`).
pub(crate) async fn try_presented(address: SocketAddr, ca_der: &[u8]) -> std::io::Result<Vec<u8>> {
    let stream = connect(address, ca_der).await?;
    let (_, session) = stream.get_ref();
    Ok(session.peer_certificates().expect("a certificate")[0].to_vec())
}

/// Sends `head` (request line and headers, without the blank line) and
/// `body`, and returns the status code and the body of the answer.
pub(crate) async fn request(
    address: SocketAddr,
    ca_der: &[u8],
    head: &str,
    body: &[u8],
) -> (u16, String) {
    let mut stream = connect(address, ca_der)
        .await
        .expect("the handshake succeeds");
    let head = format!(
        "{head}\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let exchange = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = within("an HTTP exchange", LIMIT, exchange)
        .await
        .expect("the exchange succeeds");
    let answer = String::from_utf8(answer).expect("a UTF-8 answer");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    (status, body)
}
