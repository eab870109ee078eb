//! Bad input over TLS, without the API server: malformed or oversized
//! reviews get a `400` with a clear message, a wrong method `405`, an
//! unknown path `404`; a client that does not trust the CA fails its
//! handshake; all counted.

use k8s_openapi::api::core::v1::ConfigMap;
use tempfile::TempDir;
use tend::webhook::{AdmissionRequest, Verdict, Webhook, WebhookServer};

use super::Served;
use super::certs::{Ca, Volume};
use super::tls_client::{connect, request};

const POST: &str = "POST /validate HTTP/1.1\r\nContent-Type: application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_reviews_are_400_with_a_clear_message() {
    let (ca, dir) = (Ca::new("input-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let allow = Webhook::validating(|_: AdmissionRequest<ConfigMap>| async { Verdict::allow() });
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .max_body_bytes(1024)
            .route("/validate", allow),
    );
    let ca_der = ca.der();
    let (status, body) = request(served.address, &ca_der, POST, b"{\"kind\": ").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("malformed AdmissionReview"), "{body}");

    let (status, body) = request(
        served.address,
        &ca_der,
        POST,
        br#"{"apiVersion":"v1","kind":"Status"}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("expected an AdmissionReview, got kind \"Status\""),
        "{body}"
    );

    let oversized = vec![b' '; 2048];
    let (status, body) = request(served.address, &ca_der, POST, &oversized).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("larger than the limit of 1024 bytes"),
        "{body}"
    );

    let (status, _) = request(served.address, &ca_der, "GET /validate HTTP/1.1", b"").await;
    assert_eq!(status, 405);
    let (status, body) = request(
        served.address,
        &ca_der,
        "POST /nowhere HTTP/1.1\r\nContent-Type: application/json",
        b"{}",
    )
    .await;
    assert_eq!(
        (status, body.trim()),
        (404, "no webhook is served on /nowhere")
    );

    let stranger = Ca::new("stranger");
    assert!(
        connect(served.address, &stranger.der()).await.is_err(),
        "a client of another CA refuses the server"
    );
    // The server goes on serving after all of it.
    let (status, _) = request(served.address, &ca_der, POST, b"{}").await;
    assert_eq!(status, 400);
    assert_eq!(
        served.sample(
            r#"tend_webhook_rejected_requests_total{webhook="/validate",reason="malformed"}"#
        ),
        3.0
    );
    assert_eq!(
        served.sample(
            r#"tend_webhook_rejected_requests_total{webhook="/validate",reason="too_large"}"#
        ),
        1.0
    );
    assert_eq!(
        served
            .sample(r#"tend_webhook_rejected_requests_total{webhook="/validate",reason="method"}"#),
        1.0
    );
    assert_eq!(
        served
            .sample(r#"controller_runtime_webhook_requests_total{webhook="/validate",code="400"}"#),
        4.0
    );
    served.stop().await;
}
