//! Bad input over TLS, without the API server: malformed or oversized
//! reviews get a `400` with a clear message, a wrong method `405`, an
//! unknown path `404`; a client that does not trust the CA fails its
//! handshake; all counted, and the server goes on serving.

use k8s_openapi::api::core::v1::ConfigMap;
use tempfile::TempDir;
use tend::webhook::{AdmissionRequest, Verdict, Webhook, WebhookServer};

use super::Served;
use super::certs::{Ca, Volume};
use super::tls_client::{connect, request};

const POST: &str = "POST /validate HTTP/1.1\r\nContent-Type: application/json";

/// A server with one webhook that allows everything, a body limit of
/// 1 KiB, and its CA's certificate (DER).
fn start(dir: &TempDir) -> (Served, Vec<u8>) {
    let ca = Ca::new("input-ca");
    let volume = Volume::new(dir.path(), &ca.serving());
    let allow = Webhook::validating(|_: AdmissionRequest<ConfigMap>| async { Verdict::allow() });
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .max_body_bytes(1024)
            .route("/validate", allow),
    );
    (served, ca.der())
}

fn rejected(served: &Served, reason: &str) -> f64 {
    served.sample(&format!(
        r#"tend_webhook_rejected_requests_total{{webhook="/validate",reason="{reason}"}}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_reviews_are_400_with_a_clear_message() {
    let dir = TempDir::new().unwrap();
    let (served, ca) = start(&dir);
    let cases: [(&[u8], &str); 4] = [
        (b"{\"kind\": ", "malformed AdmissionReview"),
        (
            br#"{"apiVersion":"v1","kind":"Status"}"#,
            "expected an AdmissionReview, got kind \"Status\"",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            "the AdmissionReview has no request",
        ),
        (&[b' '; 2048], "larger than the limit of 1024 bytes"),
    ];
    for (body, expected) in cases {
        let (status, answer) = request(served.address, &ca, POST, body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.contains(expected), "{expected:?} in {answer:?}");
    }
    assert_eq!(rejected(&served, "malformed"), 3.0);
    assert_eq!(rejected(&served, "too_large"), 1.0);
    let code = r#"controller_runtime_webhook_requests_total{webhook="/validate",code="400"}"#;
    assert_eq!(served.sample(code), 4.0);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_path_or_ca_is_refused_and_the_server_goes_on() {
    let dir = TempDir::new().unwrap();
    let (served, ca) = start(&dir);
    let (status, _) = request(served.address, &ca, "GET /validate HTTP/1.1", b"").await;
    assert_eq!(status, 405);
    assert_eq!(rejected(&served, "method"), 1.0);
    let nowhere = "POST /nowhere HTTP/1.1\r\nContent-Type: application/json";
    let (status, body) = request(served.address, &ca, nowhere, b"{}").await;
    assert_eq!(
        (status, body.trim()),
        (404, "no webhook is served on /nowhere")
    );
    let stranger = Ca::new("stranger");
    let handshake = connect(served.address, &stranger.der()).await;
    assert!(
        handshake.is_err(),
        "a client of another CA refuses the server"
    );
    // Still serving.
    let (status, body) = request(served.address, &ca, POST, b"{}").await;
    assert_eq!(status, 400);
    assert!(body.contains("malformed AdmissionReview"), "{body}");
    served.stop().await;
}
