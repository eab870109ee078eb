//! Webhook configurations for one test's namespace, and the wait until the
//! API server acts on them.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{LIMIT, TAKES_EFFECT, within};

/// What a configuration's one webhook is.
pub(crate) struct Hook<'a> {
    /// Unique in the cluster (also the webhook's name, under
    /// `.webhooks.tend.test`).
    pub(crate) name: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) url: String,
    pub(crate) ca_pem: &'a str,
    /// `Fail` or `Ignore`.
    pub(crate) policy: &'a str,
    pub(crate) timeout_seconds: i32,
}

impl Hook<'_> {
    fn webhook(&self) -> Value {
        json!({
            "name": format!("{}.webhooks.tend.test", self.name),
            "clientConfig": {
                "url": self.url,
                "caBundle": base64(self.ca_pem.as_bytes()),
            },
            "rules": [{
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["configmaps"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": self.namespace},
            },
            "failurePolicy": self.policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": self.timeout_seconds,
        })
    }

    fn config(&self, kind: &str) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": self.name},
            "webhooks": [self.webhook()],
        })
    }

    /// Creates it as a `ValidatingWebhookConfiguration`.
    pub(crate) async fn validating(&self, client: &kube::Client) {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let config = serde_json::from_value(self.config("ValidatingWebhookConfiguration"))
            .expect("a valid configuration");
        within(
            "creating the validating configuration",
            LIMIT,
            api.create(&PostParams::default(), &config),
        )
        .await
        .expect("the validating configuration is created");
    }

    /// Creates it as a `MutatingWebhookConfiguration`.
    pub(crate) async fn mutating(&self, client: &kube::Client) {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let config = serde_json::from_value(self.config("MutatingWebhookConfiguration"))
            .expect("a valid configuration");
        within(
            "creating the mutating configuration",
            LIMIT,
            api.create(&PostParams::default(), &config),
        )
        .await
        .expect("the mutating configuration is created");
    }
}

/// Deletes the validating configuration `name` (they are cluster-wide).
pub(crate) async fn delete_validating(client: &kube::Client, name: &str) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    within(
        "deleting a configuration",
        LIMIT,
        api.delete(name, &DeleteParams::default()),
    )
    .await
    .expect("the configuration is deleted");
}

/// Deletes the mutating configuration `name`.
pub(crate) async fn delete_mutating(client: &kube::Client, name: &str) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    within(
        "deleting a configuration",
        LIMIT,
        api.delete(name, &DeleteParams::default()),
    )
    .await
    .expect("the configuration is deleted");
}

/// Calls `attempt` with 0, 1, 2 … until it returns `Some`, every 100 ms,
/// failing the test naming `what` after [`TAKES_EFFECT`]: the API server
/// takes a moment to use a new configuration.
pub(crate) async fn until<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(what, TAKES_EFFECT, async {
        for n in 0.. {
            if let Some(found) = attempt(n).await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!("the attempts are unbounded")
    })
    .await
}

/// The API error of a failed call, or a panic naming what was expected.
pub(crate) fn api_error(
    result: Result<impl std::fmt::Debug, kube::Error>,
    what: &str,
) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("{what}: expected an API error, got {other:?}"),
    }
}

/// Standard base64 with padding (a `caBundle`).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
