//! Unit tests of conversion reviews: each object converted, the desired
//! version passed through, failures as a `Failure` status.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::{call, post, response_of, review, shared};
use crate::webhook::Webhook;

fn conversion_review(desired: &str, objects: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": objects},
    }))
    .unwrap()
}

fn widget(version: &str, name: &str, spec: &Value) -> Value {
    json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

fn converter() -> Webhook {
    Webhook::conversion(|mut object: Value, desired: String| async move {
        if object["spec"]["broken"] == true {
            return Err("this widget cannot be converted".to_owned());
        }
        if object["spec"]["wrong_version"] == true {
            return Ok(object);
        }
        let size = object["spec"]["size"].take();
        object["spec"] = json!({"replicas": size});
        object["apiVersion"] = Value::String(desired);
        Ok(object)
    })
}

#[tokio::test]
async fn conversion_converts_each_object_and_passes_the_desired_version_through() {
    let shared = shared(vec![("/convert", converter())], 1 << 20, 4);
    let objects = [
        widget("v1", "a", &json!({"size": 3})),
        widget("v2", "b", &json!({"replicas": 4})),
    ];
    let (status, answer) = call(
        &shared,
        post("/convert", conversion_review("example.com/v2", &objects)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let response = response_of(&answer);
    assert_eq!(response["uid"], "c-1");
    assert_eq!(response["result"]["status"], "Success");
    let converted = response["convertedObjects"].as_array().unwrap();
    assert_eq!(converted[0]["spec"], json!({"replicas": 3}));
    assert_eq!(converted[0]["apiVersion"], "example.com/v2");
    assert_eq!(converted[1], objects[1], "already at v2: untouched");
}

#[tokio::test]
async fn a_failed_conversion_is_a_failure_status_with_the_message() {
    let shared = shared(vec![("/convert", converter())], 1 << 20, 4);
    let cases = [
        (
            json!({"broken": true}),
            "converting a to example.com/v2: this widget cannot be converted",
        ),
        (
            json!({"wrong_version": true}),
            "converting a to example.com/v2: the converter returned apiVersion example.com/v1",
        ),
    ];
    for (spec, expected) in cases {
        let body = conversion_review("example.com/v2", &[widget("v1", "a", &spec)]);
        let (status, answer) = call(&shared, post("/convert", body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let result = &response_of(&answer)["result"];
        assert_eq!(result["status"], "Failure");
        assert_eq!(result["message"], expected);
    }
    let (status, answer) = call(&shared, post("/convert", review("ConfigMap", &json!({})))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer.contains("expected a ConversionReview, got kind \"AdmissionReview\""),
        "{answer}"
    );
}
