//! Certificate rotation without a restart: a new certificate of the same
//! CA, swapped in as the kubelet swaps a mounted Secret, is presented from
//! the next handshake on while the API server keeps calling; a bad one
//! keeps the old serving and is counted; a certificate of a new CA serves
//! once the configuration's `caBundle` names it.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tempfile::TempDir;
use tend::webhook::{AdmissionRequest, Verdict, Webhook, WebhookServer};

use super::certs::{Ca, Volume};
use super::configs::{Hook, delete_validating, until};
use super::tls_client::{connect, presented, try_presented};
use super::{LIMIT, Served, setup, within};

async fn deny_all(_: AdmissionRequest<ConfigMap>) -> Verdict {
    Verdict::deny("rotation test")
}

fn served(volume: &Volume) -> Served {
    Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .certificate_check_interval(Duration::from_millis(100))
            .route("/deny", Webhook::validating(deny_all)),
    )
}

/// Waits until the server presents `der` to a client trusting `ca_der`.
async fn until_presented(served: &Served, ca_der: &[u8], der: &[u8], what: &str) {
    until(what, |_| async move {
        let now = try_presented(served.address, ca_der).await;
        now.is_ok_and(|now| now == der).then_some(())
    })
    .await;
}

/// Waits until the API server's create of a probe is denied by the webhook.
async fn until_denied(maps: &Api<ConfigMap>) {
    until("the API server to call the webhook", |n| async move {
        let probe = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("probe-{n}")),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        match maps.create(&PostParams::default(), &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("rotation test") => Some(()),
            Ok(_) => {
                let _ = maps
                    .delete(&format!("probe-{n}"), &DeleteParams::default())
                    .await;
                None
            }
            Err(_) => None,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_serves_without_a_restart_and_a_bad_one_keeps_the_old() {
    let (client, namespace) = setup("webhook-rotate").await;
    let (ca, dir) = (Ca::new("rotate-ca"), TempDir::new().unwrap());
    let first = ca.serving();
    let mut volume = Volume::new(dir.path(), &first);
    let served = served(&volume);
    let name = format!("rotate-{namespace}");
    let hook = Hook {
        name: &name,
        namespace: &namespace,
        url: served.url("/deny"),
        ca_pem: &ca.pem(),
        policy: "Fail",
        timeout_seconds: 5,
    };
    hook.validating(&client).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    until_denied(&maps).await;
    assert_eq!(presented(served.address, &ca.der()).await, first.der);

    let second = ca.serving();
    assert_ne!(second.der, first.der, "a new key and serial");
    volume.write(&second.cert_pem, &second.key_pem);
    until_presented(&served, &ca.der(), &second.der, "the rotated certificate").await;
    assert_eq!(
        served.sample(r#"tend_webhook_certificate_reloads_total{result="ok"}"#),
        1.0
    );
    until_denied(&maps).await;

    // A bad pair (a key of another certificate): logged, counted, and the
    // second certificate goes on serving.
    let other = ca.serving();
    volume.write(&second.cert_pem, &other.key_pem);
    until("the bad pair to be counted", |_| async {
        (served.sample(r#"tend_webhook_certificate_reloads_total{result="failed"}"#) == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(presented(served.address, &ca.der()).await, second.der);
    until_denied(&maps).await;
    // Garbage in the certificate file: the same.
    volume.write("not a certificate", &second.key_pem);
    until("the garbage to be counted", |_| async {
        (served.sample(r#"tend_webhook_certificate_reloads_total{result="failed"}"#) == 2.0)
            .then_some(())
    })
    .await;
    assert_eq!(presented(served.address, &ca.der()).await, second.der);
    delete_validating(&client, &name).await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_a_new_ca_serves_once_the_ca_bundle_names_it() {
    let (client, namespace) = setup("webhook-new-ca").await;
    let (old_ca, new_ca, dir) = (
        Ca::new("old-ca"),
        Ca::new("new-ca"),
        TempDir::new().unwrap(),
    );
    let mut volume = Volume::new(dir.path(), &old_ca.serving());
    let served = served(&volume);
    let name = format!("new-ca-{namespace}");
    let hook = Hook {
        name: &name,
        namespace: &namespace,
        url: served.url("/deny"),
        ca_pem: &old_ca.pem(),
        policy: "Fail",
        timeout_seconds: 5,
    };
    hook.validating(&client).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    until_denied(&maps).await;

    let next = new_ca.serving();
    volume.write(&next.cert_pem, &next.key_pem);
    until_presented(
        &served,
        &new_ca.der(),
        &next.der,
        "the new CA's certificate",
    )
    .await;
    let refused = within(
        "a handshake trusting the old CA",
        LIMIT,
        connect(served.address, &old_ca.der()),
    )
    .await;
    assert!(
        refused.is_err(),
        "a client of the old CA no longer trusts the server"
    );

    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut config = within("a read", LIMIT, configs.get(&name))
        .await
        .expect("the configuration");
    config.webhooks.as_mut().unwrap()[0].client_config.ca_bundle =
        Some(k8s_openapi::ByteString(new_ca.pem().into_bytes()));
    let patch = Patch::Merge(json!({"webhooks": config.webhooks}));
    within(
        "the new caBundle",
        LIMIT,
        configs.patch(&name, &PatchParams::default(), &patch),
    )
    .await
    .expect("the caBundle is updated");
    until_denied(&maps).await;
    delete_validating(&client, &name).await;
    served.stop().await;
}
