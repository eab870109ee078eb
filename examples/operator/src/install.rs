//! What a deployment installs once: the namespace, the CRD, and (with
//! `--embedded`) the webhook configuration pointing at this process.

use std::time::Duration;

use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use tend::kube::k8s_openapi::ByteString;
use tend::kube::k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use tend::kube::k8s_openapi::api::core::v1::Namespace;
use tend::kube::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tend::kube::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::BoxError;
use crate::website::{Website, WebsiteSpec};

/// The field manager of the operator's server-side applies.
const MANAGER: &str = "website-operator";

/// Creates `name` unless it exists.
pub async fn namespace(client: &Client, name: &str) -> Result<(), BoxError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &namespace).await {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        result => result.map(drop).map_err(Into::into),
    }
}

/// Applies the `Website` CRD and waits until the API server serves it.
pub async fn crd(client: &Client) -> Result<(), BoxError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Website::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    poll("the Website CRD to be established", || async {
        let crd = crds.get(&name).await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await
}

/// Registers the validating webhook at `url` for the websites of
/// `namespace`, trusting `ca_pem`, and waits until the API server calls it.
pub async fn webhook(
    client: &Client,
    namespace: &str,
    url: String,
    ca_pem: &str,
) -> Result<(), BoxError> {
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = webhook_configuration(namespace, url, ca_pem);
    let name = config.metadata.name.clone().unwrap_or_default();
    configs
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&config),
        )
        .await?;
    // A dry-run create of an invalid site: refused once the webhook acts.
    let sites: Api<Website> = Api::namespaced(client.clone(), namespace);
    let mut probe = Website::new(
        "webhook-probe",
        WebsiteSpec {
            replicas: u32::MAX,
            image: "probe".into(),
        },
    );
    probe.metadata.namespace = Some(namespace.to_owned());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    poll("the API server to call the webhook", || async {
        match sites.create(&dry_run, &probe).await {
            Err(kube::Error::Api(status)) => {
                status.message.contains("denied the request").then_some(())
            }
            _ => None,
        }
    })
    .await
}

fn webhook_configuration(
    namespace: &str,
    url: String,
    ca_pem: &str,
) -> ValidatingWebhookConfiguration {
    let rule = RuleWithOperations {
        api_groups: Some(vec!["tend.example.com".to_owned()]),
        api_versions: Some(vec!["v1".to_owned()]),
        operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
        resources: Some(vec!["websites".to_owned()]),
        scope: Some("Namespaced".to_owned()),
    };
    let only_ours = LabelSelector {
        match_labels: Some(
            [(
                "kubernetes.io/metadata.name".to_owned(),
                namespace.to_owned(),
            )]
            .into(),
        ),
        ..LabelSelector::default()
    };
    let hook = ValidatingWebhook {
        name: "websites.tend.example.com".to_owned(),
        client_config: WebhookClientConfig {
            url: Some(url),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        rules: Some(vec![rule]),
        namespace_selector: Some(only_ours),
        failure_policy: Some("Fail".to_owned()),
        side_effects: "None".to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        timeout_seconds: Some(5),
        ..ValidatingWebhook::default()
    };
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(format!("websites-{namespace}")),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![hook]),
    }
}

/// Calls `check` every 100 ms until it returns `Some`, for at most 30 s.
pub async fn poll<F, Fut>(what: &str, mut check: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<()>>,
{
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while check().await.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    waited
        .await
        .map_err(|_| format!("timed out waiting for {what}").into())
}
