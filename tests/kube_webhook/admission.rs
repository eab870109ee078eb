//! A validating webhook's denial reaches the client as a typed error with
//! the handler's message; a mutating webhook's change is stored.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use tempfile::TempDir;
use tend::client::ClientError;
use tend::kube::KubeSource;
use tend::webhook::{AdmissionRequest, Mutation, Operation, Verdict, Webhook, WebhookServer};

use super::certs::{Ca, Volume};
use super::configs::{Hook, api_error, delete_mutating, delete_validating, until};
use super::{LIMIT, Served, setup, within};

const DENIAL: &str = "the key `forbidden` is not allowed";

fn map(namespace: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

async fn validate(request: AdmissionRequest<ConfigMap>) -> Verdict {
    assert_eq!(
        request.operation,
        Operation::Create,
        "the rules name CREATE and UPDATE"
    );
    let data = request.object.and_then(|map| map.data).unwrap_or_default();
    if data.contains_key("forbidden") {
        Verdict::deny(DENIAL)
    } else {
        Verdict::allow()
    }
}

/// Creates probes until one is refused: the configuration acts.
async fn until_refused(
    maps: &Api<ConfigMap>,
    namespace: &str,
    data: &[(&str, &str)],
) -> kube::Error {
    until("the webhook to refuse a probe", |n| {
        let probe = map(namespace, &format!("probe-{n}"), data);
        async move {
            match maps.create(&PostParams::default(), &probe).await {
                Ok(_) => {
                    let _ = maps
                        .delete(&format!("probe-{n}"), &DeleteParams::default())
                        .await;
                    None
                }
                Err(error) => Some(error),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_create_reaches_the_client_as_a_typed_error_with_the_handlers_message() {
    let (client, namespace) = setup("webhook-deny").await;
    let (ca, dir) = (Ca::new("deny-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .route("/validate", Webhook::validating(validate)),
    );
    let name = format!("deny-{namespace}");
    let hook = Hook {
        name: &name,
        namespace: &namespace,
        url: served.url("/validate"),
        ca_pem: &ca.pem(),
        policy: "Fail",
        timeout_seconds: 5,
    };
    hook.validating(&client).await;

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let status = api_error(
        Err::<(), _>(until_refused(&maps, &namespace, &[("forbidden", "1")]).await),
        "the kube client",
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert_eq!(status.reason, "Forbidden");
    let expected =
        format!("admission webhook \"{name}.webhooks.tend.test\" denied the request: {DENIAL}");
    assert_eq!(status.message, expected);

    tend_client_gets_a_refusal(&client, &namespace, &expected).await;
    assert!(
        served
            .sample(r#"controller_runtime_webhook_requests_total{webhook="/validate",code="200"}"#)
            >= 3.0
    );
    delete_validating(&client, &name).await;
    served.stop().await;
}

/// A denied create through tend's client: a typed refusal, not a
/// retryable error, whose source is the API's status; an allowed one is
/// stored.
async fn tend_client_gets_a_refusal(client: &kube::Client, namespace: &str, expected: &str) {
    let tend_maps = KubeSource::<ConfigMap>::namespaced(client.clone(), namespace).client();
    let error = within(
        "a create",
        LIMIT,
        tend_maps.create(map(namespace, "denied", &[("forbidden", "1")])),
    )
    .await
    .unwrap_err();
    assert!(error.is_forbidden() && !error.is_retryable(), "{error:?}");
    let ClientError::Forbidden { source, .. } = &error else {
        unreachable!()
    };
    match source.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.message.as_str()), (403, expected));
        }
        other => panic!("the source is the API's status, got {other:?}"),
    }
    within(
        "a create",
        LIMIT,
        tend_maps.create(map(namespace, "allowed", &[("fine", "1")])),
    )
    .await
    .expect("an allowed create");
}

async fn label(request: AdmissionRequest<ConfigMap>) -> Mutation<ConfigMap> {
    let Some(mut map) = request.object else {
        return Mutation::unchanged();
    };
    map.metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "shop".into());
    map.data
        .get_or_insert_default()
        .insert("added".into(), "by-webhook".into());
    Mutation::object(map).with_warning("labelled team=shop")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_is_visible_on_the_stored_object() {
    let (client, namespace) = setup("webhook-mutate").await;
    let (ca, dir) = (Ca::new("mutate-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .route("/mutate", Webhook::mutating(label)),
    );
    let name = format!("mutate-{namespace}");
    let hook = Hook {
        name: &name,
        namespace: &namespace,
        url: served.url("/mutate"),
        ca_pem: &ca.pem(),
        policy: "Fail",
        timeout_seconds: 5,
    };
    hook.mutating(&client).await;

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let created = until("the mutation to show on a created object", |n| {
        let maps = maps.clone();
        let probe = map(&namespace, &format!("m-{n}"), &[("kept", "1")]);
        async move {
            let created = maps
                .create(&PostParams::default(), &probe)
                .await
                .expect("a create");
            created.metadata.labels.is_some().then_some(created)
        }
    })
    .await;
    let name_of = created.metadata.name.clone().unwrap();
    let stored = within("a read", LIMIT, maps.get(&name_of))
        .await
        .expect("the object is stored");
    assert_eq!(
        stored.metadata.labels,
        Some(BTreeMap::from([("team".into(), "shop".into())]))
    );
    let data = stored.data.unwrap();
    assert_eq!(
        (data["kept"].as_str(), data["added"].as_str()),
        ("1", "by-webhook")
    );
    delete_mutating(&client, &name).await;
    served.stop().await;
}
