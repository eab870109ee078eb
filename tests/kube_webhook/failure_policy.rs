//! The failure policy: a handler that panics or runs past its timeout,
//! and a server that is down, refuse the request under `Fail` and admit it
//! under `Ignore`; panics and timeouts are counted.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use tempfile::TempDir;
use tend::webhook::{AdmissionRequest, Verdict, Webhook, WebhookServer};

use super::certs::{Ca, Volume};
use super::configs::{Hook, api_error, delete_validating, until};
use super::{LIMIT, Served, setup, within};

/// What the handler does, by the object's `mode` label.
async fn by_mode(request: AdmissionRequest<ConfigMap>) -> Verdict {
    let labels = request
        .object
        .and_then(|map| map.metadata.labels)
        .unwrap_or_default();
    match labels.get("mode").map(String::as_str) {
        Some("deny") => Verdict::deny("denied by mode"),
        Some("panic") => panic!("the handler panics on purpose"),
        Some("slow") => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Verdict::allow()
        }
        _ => Verdict::allow(),
    }
}

fn labelled(name: &str, mode: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("mode".to_owned(), mode.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// The two namespaces, one under each policy, each with its API.
struct Policies {
    fail: Api<ConfigMap>,
    ignore: Api<ConfigMap>,
}

impl Policies {
    /// Waits until both configurations deny a `deny` probe.
    async fn wait_active(&self) {
        for maps in [&self.fail, &self.ignore] {
            until("the configuration to deny a probe", |n| async move {
                let name = format!("probe-{n}");
                match maps
                    .create(&PostParams::default(), &labelled(&name, "deny"))
                    .await
                {
                    Ok(_) => {
                        let _ = maps.delete(&name, &DeleteParams::default()).await;
                        None
                    }
                    Err(error) => Some(error),
                }
            })
            .await;
        }
    }

    /// Creates `name` with `mode` under both policies: `Fail` refuses it as
    /// a failed call (500, "failed calling webhook"), `Ignore` admits it.
    async fn check(&self, name: &str, mode: &str) {
        let refused = within(
            "a create under Fail",
            LIMIT,
            self.fail
                .create(&PostParams::default(), &labelled(name, mode)),
        )
        .await;
        let status = api_error(refused, &format!("{mode} under Fail"));
        assert_eq!(status.code, 500, "{mode}: {status:?}");
        assert!(
            status.message.contains("failed calling webhook"),
            "{mode}: {status:?}"
        );
        within(
            "a create under Ignore",
            LIMIT,
            self.ignore
                .create(&PostParams::default(), &labelled(name, mode)),
        )
        .await
        .unwrap_or_else(|error| panic!("{mode} under Ignore is admitted: {error}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_timeouts_and_a_stopped_server_follow_the_failure_policy() {
    let (client, fail_ns) = setup("webhook-fail").await;
    let (_, ignore_ns) = setup("webhook-ignore").await;
    let (ca, dir) = (Ca::new("policy-ca"), TempDir::new().unwrap());
    let volume = Volume::new(dir.path(), &ca.serving());
    let webhook = Webhook::validating(by_mode).timeout(Duration::from_secs(1));
    let served = Served::start(
        WebhookServer::builder("127.0.0.1:0".parse().unwrap(), volume.files())
            .route("/policy", webhook),
    );
    let ca_pem = ca.pem();
    let names = [format!("fail-{fail_ns}"), format!("ignore-{ignore_ns}")];
    for (name, namespace, policy) in [
        (&names[0], &fail_ns, "Fail"),
        (&names[1], &ignore_ns, "Ignore"),
    ] {
        let hook = Hook {
            name,
            namespace,
            url: served.url("/policy"),
            ca_pem: &ca_pem,
            policy,
            timeout_seconds: 5,
        };
        hook.validating(&client).await;
    }
    let policies = Policies {
        fail: Api::namespaced(client.clone(), &fail_ns),
        ignore: Api::namespaced(client.clone(), &ignore_ns),
    };
    policies.wait_active().await;

    policies.check("panics", "panic").await;
    assert!(served.sample(r#"controller_runtime_webhook_panics_total{webhook="/policy"}"#) >= 2.0);
    assert!(
        served.sample(r#"controller_runtime_webhook_requests_total{webhook="/policy",code="500"}"#)
            >= 2.0
    );
    policies.check("slow", "slow").await;
    assert!(served.sample(r#"tend_webhook_timeouts_total{webhook="/policy"}"#) >= 2.0);
    assert!(
        served.sample(r#"controller_runtime_webhook_requests_total{webhook="/policy",code="504"}"#)
            >= 2.0
    );

    // Down: no connection at all.
    let address = served.address;
    served.stop().await;
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "nothing listens any more"
    );
    policies.check("down", "plain").await;

    for name in &names {
        delete_validating(&client, name).await;
    }
}
