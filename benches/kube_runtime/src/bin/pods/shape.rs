//! A Pod shaped like a real cluster's: two containers with env, ports,
//! resources, probes and mounts, three volumes, tolerations, an owner, and
//! (written separately, as a kubelet does) a running status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, ContainerState, ContainerStateRunning,
    ContainerStatus, EmptyDirVolumeSource, EnvVar, HTTPGetAction, Pod, PodCondition, PodSpec,
    PodStatus, Probe, ResourceRequirements, SecretVolumeSource, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(8080),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..VolumeMount::default()
    }
}

fn container(name: &str, i: usize) -> Container {
    let env = (0..10)
        .map(|k| EnvVar {
            name: format!("SETTING_{k}"),
            value: Some(format!("value-{k}-{}", i % 97)),
            ..EnvVar::default()
        })
        .collect();
    let quantity = |q: &str| Quantity(q.to_owned());
    Container {
        name: name.to_owned(),
        image: Some(format!(
            "registry.example.com/shop/{name}:1.{}.{}",
            i % 7,
            i % 13
        )),
        args: Some(vec!["--port=8080".into(), "--log-level=info".into()]),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            container_port: 8080,
            name: Some("http".into()),
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".into(), quantity("100m")),
                    ("memory".into(), quantity("128Mi")),
                ]
                .into(),
            ),
            limits: Some(
                [
                    ("cpu".into(), quantity("500m")),
                    ("memory".into(), quantity("512Mi")),
                ]
                .into(),
            ),
            ..ResourceRequirements::default()
        }),
        liveness_probe: Some(probe("/healthz")),
        readiness_probe: Some(probe("/readyz")),
        volume_mounts: Some(vec![
            mount("config", "/etc/shop"),
            mount("tls", "/etc/tls"),
            mount("cache", "/var/cache/shop"),
        ]),
        ..Container::default()
    }
}

/// A config map's, a secret's and an empty directory.
fn volumes(app: &str) -> Vec<Volume> {
    vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: format!("{app}-config"),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(format!("{app}-tls")),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "cache".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    ]
}

/// Pod `i` of `namespace`, without status.
pub fn pod(namespace: &str, i: usize) -> Pod {
    let app = format!("shop-{}", i % 50);
    let metadata = ObjectMeta {
        name: Some(format!("pod-{i:06}")),
        namespace: Some(namespace.to_owned()),
        labels: Some(map(&[
            ("app.kubernetes.io/name", &app),
            ("app.kubernetes.io/part-of", "shop"),
            ("pod-template-hash", "7c9f8d6b5"),
            ("tier", ["web", "api", "worker"][i % 3]),
        ])),
        annotations: Some(map(&[
            ("kubectl.kubernetes.io/restartedAt", "2026-11-30T10:00:00Z"),
            ("prometheus.io/scrape", "true"),
        ])),
        owner_references: Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("{app}-7c9f8d6b5"),
            uid: format!("00000000-0000-4000-8000-{:012}", i % 50),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    };
    let volumes = volumes(&app);
    let toleration = |key: &str| Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: Some(300),
        ..Toleration::default()
    };
    Pod {
        metadata,
        spec: Some(PodSpec {
            containers: vec![container("app", i), container("sidecar", i)],
            volumes: Some(volumes),
            node_name: Some(format!("node-{}", i % 20)),
            service_account_name: Some("shop".into()),
            tolerations: Some(vec![
                toleration("node.kubernetes.io/not-ready"),
                toleration("node.kubernetes.io/unreachable"),
            ]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// A running status for pod `i`, as a kubelet writes it.
pub fn status(i: usize) -> PodStatus {
    let now = Time(Timestamp::now());
    let condition = |kind: &str| PodCondition {
        type_: kind.to_owned(),
        status: "True".into(),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    };
    let running = |name: &str| ContainerStatus {
        name: name.to_owned(),
        ready: true,
        restart_count: 0,
        image: format!("registry.example.com/shop/{name}:1.{}.{}", i % 7, i % 13),
        image_id: format!("registry.example.com/shop/{name}@sha256:{:064x}", i),
        container_id: Some(format!("containerd://{:064x}", i * 31 + 7)),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(now.clone()),
            }),
            ..ContainerState::default()
        }),
        started: Some(true),
        ..ContainerStatus::default()
    };
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(
            ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                .map(condition)
                .to_vec(),
        ),
        host_ip: Some(format!("10.0.{}.{}", i % 20, 10)),
        pod_ip: Some(format!("10.244.{}.{}", (i / 250) % 250, i % 250)),
        start_time: Some(now.clone()),
        container_statuses: Some(vec![running("app"), running("sidecar")]),
        qos_class: Some("Burstable".into()),
        ..PodStatus::default()
    }
}
