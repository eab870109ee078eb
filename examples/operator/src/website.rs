//! The custom resource: a `Website` (group `tend.example.com`, version
//! `v1`) wants `replicas` pods serving `image`, and reports in its status
//! subresource how many it has and a `Ready` condition.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tend::kube::k8s_openapi::jiff::Timestamp;

/// The most pods a website may ask for (the validating webhook's bound).
pub const MAX_REPLICAS: u32 = 10;

/// What a website wants.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tend.example.com",
    version = "v1",
    kind = "Website",
    namespaced,
    status = "WebsiteStatus",
    shortname = "site",
    derive = "PartialEq",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    crates(k8s_openapi = "::tend::kube::k8s_openapi")
)]
pub struct WebsiteSpec {
    /// How many pods serve the site.
    pub replicas: u32,
    /// The image they run.
    pub image: String,
}

/// What the operator saw, as of `observed_generation`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebsiteStatus {
    /// The pods that exist (live, not being deleted).
    pub replicas: u32,
    /// The spec generation this status describes.
    pub observed_generation: Option<i64>,
    /// `Ready`: every wanted pod exists.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A condition, as Kubernetes' `metav1.Condition` has it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    pub observed_generation: Option<i64>,
}

impl WebsiteStatus {
    /// The status of a site that has `replicas` of the `wanted` pods at
    /// `generation`; the `Ready` condition keeps its transition time from
    /// `previous` while its status stays.
    pub fn new(
        previous: Option<&Self>,
        replicas: u32,
        wanted: u32,
        generation: Option<i64>,
    ) -> Self {
        let ready = replicas == wanted;
        let status = if ready { "True" } else { "False" };
        let since = previous
            .and_then(|p| p.ready())
            .filter(|c| c.status == status)
            .map_or_else(
                || Timestamp::now().to_string(),
                |c| c.last_transition_time.clone(),
            );
        let condition = Condition {
            type_: "Ready".to_owned(),
            status: status.to_owned(),
            reason: if ready { "AllPodsCreated" } else { "Scaling" }.to_owned(),
            message: format!("{replicas} of {wanted} pods"),
            last_transition_time: since,
            observed_generation: generation,
        };
        Self {
            replicas,
            observed_generation: generation,
            conditions: vec![condition],
        }
    }

    /// The `Ready` condition.
    pub fn ready(&self) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == "Ready")
    }

    /// Whether `Ready` is `True`.
    pub fn is_ready(&self) -> bool {
        self.ready().is_some_and(|c| c.status == "True")
    }
}

/// Why a spec is refused, or `None` when it is valid: what the validating
/// webhook answers.
pub fn invalid(spec: &WebsiteSpec) -> Option<String> {
    if spec.replicas > MAX_REPLICAS {
        return Some(format!(
            "replicas {} is above {MAX_REPLICAS}",
            spec.replicas
        ));
    }
    if spec.image.trim().is_empty() {
        return Some("image must not be empty".to_owned());
    }
    None
}
