//! Unit tests of the webhook module: routing, bad input, body limits,
//! panics, timeouts, the concurrency bound, patches and conversions,
//! without TLS (the request handling over in-memory bodies).

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::ConfigMap;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::metrics::Metrics;
use super::request::{Route, Shared, handle};
use super::{AdmissionRequest, Mutation, Verdict, Webhook};

mod conversion;

fn shared(routes: Vec<(&str, Webhook)>, max_body: usize, permits: usize) -> Shared {
    let routes: HashMap<String, Route> = routes
        .into_iter()
        .map(|(path, webhook)| {
            let route = Route {
                endpoint: webhook.endpoint,
                timeout: webhook.timeout,
            };
            (path.to_owned(), route)
        })
        .collect();
    Shared {
        routes,
        max_body,
        permits: Semaphore::new(permits),
        metrics: Metrics::new(),
    }
}

fn post(path: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap()
}

fn review(kind: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "a",
            "namespace": "ns",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": object,
        }
    }))
    .unwrap()
}

fn config_map(data: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": data})
}

async fn call(shared: &Shared, request: Request<Full<Bytes>>) -> (StatusCode, String) {
    let response: Response<Full<Bytes>> = handle(shared, request).await;
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn response_of(body: &str) -> Value {
    serde_json::from_str::<Value>(body).unwrap()["response"].clone()
}

fn metrics_text(shared: &Shared) -> String {
    let mut registry = Registry::default();
    shared.metrics.register(&mut registry);
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    text
}

fn deny_big() -> Webhook {
    Webhook::validating(|request: AdmissionRequest<ConfigMap>| async move {
        let keys = request
            .object
            .and_then(|map| map.data)
            .map_or(0, |d| d.len());
        if keys > 1 {
            Verdict::deny("at most one key").with_warning("be brief")
        } else {
            Verdict::allow()
        }
    })
}

#[tokio::test]
async fn a_denial_carries_its_message_code_warnings_and_the_request_uid() {
    let shared = shared(vec![("/validate", deny_big())], 1 << 20, 4);
    let body = review("ConfigMap", &config_map(&json!({"a": "1", "b": "2"})));
    let (status, body) = call(&shared, post("/validate", body)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let response = response_of(&body);
    assert_eq!(response["uid"], "uid-1");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["message"], "at most one key");
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["warnings"], json!(["be brief"]));

    let body = review("ConfigMap", &config_map(&json!({"a": "1"})));
    let (_, body) = call(&shared, post("/validate", body)).await;
    assert_eq!(response_of(&body)["allowed"], true);
    let text = metrics_text(&shared);
    assert!(
        text.contains(
            r#"controller_runtime_webhook_requests_total{webhook="/validate",code="200"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"controller_runtime_webhook_requests_in_flight{webhook="/validate"} 0"#)
    );
}

#[tokio::test]
async fn an_unknown_path_is_404_and_a_get_is_405() {
    let shared = shared(vec![("/validate", deny_big())], 1 << 20, 4);
    let (status, body) = call(&shared, post("/other", "{}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no webhook is served on /other"), "{body}");
    let get = Request::get("/validate")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = call(&shared, get).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body.contains("webhooks take POST, not GET"), "{body}");
}

#[tokio::test]
async fn bad_input_is_400_with_a_clear_message_and_counted() {
    let shared = shared(vec![("/validate", deny_big())], 1 << 20, 4);
    let cases: [(&[u8], &str); 5] = [
        (b"{not json", "malformed AdmissionReview"),
        (
            br#"{"apiVersion":"v1","kind":"ConfigMap"}"#,
            "expected an AdmissionReview, got kind \"ConfigMap\"",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            "the AdmissionReview has no request",
        ),
        (
            &review(
                "Pod",
                &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
            ),
            "this webhook reviews ConfigMap objects, the request is for a Pod",
        ),
        (
            &review("ConfigMap", &config_map(&json!(7))),
            "the AdmissionReview's object is not a valid ConfigMap",
        ),
    ];
    for (body, expected) in cases {
        let (status, answer) = call(&shared, post("/validate", body.to_vec())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer.contains(expected), "{expected:?} in {answer:?}");
    }
    let wrong_type = Request::post("/validate")
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let (status, answer) = call(&shared, wrong_type).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer.contains("must be application/json, not text/plain"),
        "{answer}"
    );
    let text = metrics_text(&shared);
    assert!(
        text.contains(
            r#"tend_webhook_rejected_requests_total{webhook="/validate",reason="malformed"} 6"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_body_above_the_limit_is_400_whether_declared_or_read() {
    let shared = shared(vec![("/validate", deny_big())], 64, 4);
    let big = vec![b' '; 65];
    let (status, answer) = call(&shared, post("/validate", big.clone())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer.contains("larger than the limit of 64 bytes"),
        "{answer}"
    );
    // A declared length past the limit is refused before the body is read.
    let declared = Request::post("/validate")
        .header("content-type", "application/json")
        .header("content-length", "1000000")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let (status, _) = call(&shared, declared).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Exactly at the limit is read (and then malformed).
    let (status, answer) = call(&shared, post("/validate", vec![b' '; 64])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer.contains("malformed AdmissionReview"), "{answer}");
    let text = metrics_text(&shared);
    assert!(text.contains(r#"reason="too_large"} 2"#), "{text}");
}

#[tokio::test]
async fn a_panicking_handler_is_500_and_counted() {
    let panics = Webhook::validating(|_: AdmissionRequest<ConfigMap>| async {
        if true {
            panic!("handler bug");
        }
        Verdict::allow()
    });
    let shared = shared(vec![("/panics", panics)], 1 << 20, 4);
    let body = review("ConfigMap", &config_map(&json!({})));
    let (status, answer) = call(&shared, post("/panics", body)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        answer.contains("the webhook handler panicked: handler bug"),
        "{answer}"
    );
    let text = metrics_text(&shared);
    assert!(
        text.contains(r#"controller_runtime_webhook_panics_total{webhook="/panics"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"code="500"} 1"#), "{text}");
}

fn slow(delay: Duration) -> Webhook {
    Webhook::validating(move |_: AdmissionRequest<ConfigMap>| async move {
        tokio::time::sleep(delay).await;
        Verdict::allow()
    })
}

#[tokio::test(start_paused = true)]
async fn a_handler_past_its_timeout_is_504_and_counted() {
    let webhook = slow(Duration::from_secs(60)).timeout(Duration::from_secs(1));
    let shared = shared(vec![("/slow", webhook)], 1 << 20, 4);
    let body = review("ConfigMap", &config_map(&json!({})));
    let (status, answer) = call(&shared, post("/slow", body)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(answer.contains("did not answer within 1s"), "{answer}");
    let text = metrics_text(&shared);
    assert!(
        text.contains(r#"tend_webhook_timeouts_total{webhook="/slow"} 1"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_of_duration_max_never_fires() {
    let webhook = slow(Duration::from_secs(3600)).timeout(Duration::MAX);
    let shared = shared(vec![("/slow", webhook)], 1 << 20, 4);
    let body = review("ConfigMap", &config_map(&json!({})));
    let (status, _) = call(&shared, post("/slow", body)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_request_past_the_concurrency_bound_waits_then_is_429() {
    let webhook = slow(Duration::from_secs(5)).timeout(Duration::from_secs(2));
    let shared = shared(vec![("/slow", webhook)], 1 << 20, 1);
    let body = review("ConfigMap", &config_map(&json!({})));
    // The first holds the one slot for its whole timeout; the second,
    // arriving together, finds no slot before its own deadline.
    let (first, second) = tokio::join!(
        call(&shared, post("/slow", body.clone())),
        call(&shared, post("/slow", body.clone())),
    );
    assert_eq!(first.0, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(second.0, StatusCode::TOO_MANY_REQUESTS, "{}", second.1);
    assert!(second.1.contains("too many concurrent webhook requests"));
    // A slot freed within the deadline is taken: a quick handler after a
    // slow one that ends in time.
    let quick = slow(Duration::from_secs(1)).timeout(Duration::from_secs(3));
    let shared = self::shared(vec![("/quick", quick)], 1 << 20, 1);
    let (first, second) = tokio::join!(
        call(&shared, post("/quick", body.clone())),
        call(&shared, post("/quick", body)),
    );
    assert_eq!((first.0, second.0), (StatusCode::OK, StatusCode::OK));
    let text = metrics_text(&shared);
    assert!(!text.contains("reason=\"busy\""), "{text}");
}

#[tokio::test]
async fn a_mutated_object_becomes_a_patch_of_only_what_changed() {
    let label = Webhook::mutating(|request: AdmissionRequest<ConfigMap>| async move {
        let mut map = request.object.unwrap();
        map.metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "shop".into());
        map.data.get_or_insert_default().remove("drop");
        Mutation::object(map)
    });
    let unchanged =
        Webhook::mutating(|_: AdmissionRequest<ConfigMap>| async { Mutation::unchanged() });
    let shared = shared(vec![("/mutate", label), ("/same", unchanged)], 1 << 20, 4);
    let body = review("ConfigMap", &config_map(&json!({"keep": "1", "drop": "2"})));
    let (status, answer) = call(&shared, post("/mutate", body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let response = response_of(&answer);
    assert_eq!(response["patchType"], "JSONPatch");
    // kube-rs encodes the patch's bytes as an array of numbers (the API
    // server takes that as well as base64).
    let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
    let patch: Value = serde_json::from_slice(&bytes).unwrap();
    let mut ops: Vec<String> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|op| {
            format!(
                "{} {}",
                op["op"].as_str().unwrap(),
                op["path"].as_str().unwrap()
            )
        })
        .collect();
    ops.sort();
    assert_eq!(ops, ["add /metadata/labels", "remove /data/drop"]);

    let (_, answer) = call(&shared, post("/same", body)).await;
    let response = response_of(&answer);
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
}

#[test]
fn a_patch_of_an_object_without_an_original_is_an_error() {
    let error = super::admission::patch(None, &ConfigMap::default()).unwrap_err();
    assert!(error.contains("a request without one"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_in_time_is_408_and_one_that_breaks_is_400() {
    use futures::stream;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    type Chunk = Result<Frame<Bytes>, std::io::Error>;
    let webhook = deny_big().timeout(Duration::from_secs(1));
    let shared = shared(vec![("/validate", webhook)], 1 << 20, 4);
    let with_body = |body: StreamBody<stream::BoxStream<'static, Chunk>>| {
        Request::post("/validate")
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    };
    let never = StreamBody::new(Box::pin(stream::pending::<Chunk>()) as stream::BoxStream<'_, _>);
    let response = handle(&shared, with_body(never)).await;
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    let broken: stream::BoxStream<'static, Chunk> = Box::pin(stream::iter([Err(
        std::io::Error::other("connection reset"),
    )]));
    let response = handle(&shared, with_body(StreamBody::new(broken))).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("reading the request body failed: connection reset"),
        "{body}"
    );
    let text = metrics_text(&shared);
    assert!(text.contains(r#"reason="slow_body"} 1"#), "{text}");
}

const ADMISSION: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},"name":"a","namespace":"ns","operation":"CREATE","userInfo":{"username":"alice"},"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}},"oldObject":null,"dryRun":false}}"#;

const CONVERSION: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u2","desiredAPIVersion":"tend.test/v2","objects":[{"apiVersion":"tend.test/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3}}]}}"#;

proptest::proptest! {
    #![proptest_config(crate::fuzz::config())]

    #[test]
    fn bad_bytes_never_panic_the_review_decoders(
        body in crate::fuzz::bytes_near(vec![ADMISSION.as_bytes().to_vec(), CONVERSION.as_bytes().to_vec()])
    ) {
        // Each is a request or a message for a 400.
        let admission = super::admission::decode::<ConfigMap>(&body);
        let conversion = super::conversion::decode(&body);
        if body == ADMISSION.as_bytes() {
            proptest::prop_assert!(admission.is_ok(), "{admission:?}");
        }
        for message in admission.as_ref().err().into_iter().chain(conversion.as_ref().err()) {
            proptest::prop_assert!(!message.is_empty());
        }
    }
}

#[test]
fn the_fuzzed_reviews_are_valid_before_they_are_mutated() {
    assert!(super::admission::decode::<ConfigMap>(ADMISSION.as_bytes()).is_ok());
    assert!(super::conversion::decode(CONVERSION.as_bytes()).is_ok());
}
