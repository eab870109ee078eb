//! The ReplicaSet loop on Kubernetes, with kube-rs's own types: apps/v1
//! `ReplicaSet`s own core/v1 `Pod`s (through owner references), and a tend
//! controller keeps each set's pod count at its `spec.replicas`. Shared by
//! the end-to-end test and `examples/kube_replicaset.rs`.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use tend::client::ClientError;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::kube::KubeSource;
use tend::{Informer, Object, ObjectKey};

/// The pods' index of their controlling set (`namespace/name`).
pub const OWNER: &str = "owner";

/// The controlling owner of `pod`, if a ReplicaSet.
pub fn owner_of(pod: &Pod) -> Option<ObjectKey> {
    tend::kube::controller_of::<ReplicaSet>(pod)
}

/// A set named `name` in `namespace` wanting `replicas` pods of `app`.
pub fn replica_set(namespace: &str, name: &str, replicas: i32) -> ReplicaSet {
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".to_owned(),
                        image: Some("myapp:1.4.0".to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            }),
            ..ReplicaSetSpec::default()
        }),
        status: None,
    }
}

/// What the controller did.
#[derive(Debug, Default)]
pub struct Counts {
    pub created: AtomicUsize,
    pub deleted: AtomicUsize,
    pub reconciles: AtomicUsize,
}

/// Observe → compare → act for one set. It trusts the cache: its writes go
/// through the reconcile's client, so its next reconcile waits until the
/// cache shows them (read-your-writes), with no hand-written expectations.
pub struct Sets {
    pub counts: Arc<Counts>,
    /// Logs each action when set.
    pub verbose: bool,
}

impl Reconciler<ReplicaSet> for Sets {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<ReplicaSet>) -> Result<Action, ClientError> {
        self.counts.reconciles.fetch_add(1, Ordering::Relaxed);
        // Gone or going: Kubernetes' garbage collector removes its pods.
        let Some(set) = ctx.object().filter(|set| set.deletion().is_none()) else {
            return Ok(Action::Done);
        };
        let cache = ctx.cache::<Pod>().expect("the controller owns pods");
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        let owned = cache
            .by_index(OWNER, &ctx.key().to_string())
            .unwrap_or_default();
        let mut live: Vec<_> = owned
            .into_iter()
            .filter(|p| p.deletion().is_none())
            .collect();
        let desired = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let desired = usize::try_from(desired).unwrap_or(0);
        if live.len() != desired {
            self.log(
                "compare",
                &format!("{}: {} pods, wants {desired}", ctx.key(), live.len()),
            );
        }
        for _ in live.len()..desired {
            let pod = pods.create(pod_for(set)).await?;
            self.counts.created.fetch_add(1, Ordering::Relaxed);
            self.log("act", &format!("create {}", pod.key()));
        }
        // Scale down: the newest first.
        live.sort_by_key(|pod| std::cmp::Reverse(pod.version()));
        for pod in live.iter().take(live.len().saturating_sub(desired)) {
            match pods.delete(&pod.key()).await {
                Ok(_) => {
                    self.counts.deleted.fetch_add(1, Ordering::Relaxed);
                    self.log("act", &format!("delete {}", pod.key()));
                }
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        let replicas = i32::try_from(desired).unwrap_or(i32::MAX);
        if set.status.as_ref().map(|s| s.replicas) != Some(replicas) {
            let mut next = (**set).clone();
            next.status = Some(ReplicaSetStatus {
                replicas,
                ..ReplicaSetStatus::default()
            });
            sets_client(&ctx).update_status(next).await?;
        }
        Ok(Action::Done)
    }
}

impl Sets {
    fn log(&self, step: &str, line: &str) {
        if self.verbose {
            println!("  {step:<8} {line}");
        }
    }
}

fn sets_client(ctx: &Context<ReplicaSet>) -> tend::client::Client<ReplicaSet> {
    ctx.client::<ReplicaSet>()
        .expect("the controller writes sets")
}

/// A new pod of `set`, controlled by it.
fn pod_for(set: &ReplicaSet) -> Pod {
    let name = set.metadata.name.clone().unwrap_or_default();
    let template = set
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let suffix: String = (0..5).map(|_| fastrand::lowercase()).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{suffix}")),
            namespace: set.metadata.namespace.clone(),
            labels: template.metadata.and_then(|m| m.labels),
            owner_references: tend::kube::controller_reference(set).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The informers and the controller, on `client`, in `namespace`.
pub struct Wiring {
    pub sets: Informer<ReplicaSet>,
    pub pods: Informer<Pod>,
    pub controller: Controller<ReplicaSet, Sets>,
}

/// Builds the informers and the controller over `namespace`.
///
/// # Errors
///
/// What building them reports.
pub fn wire(
    client: &kube::Client,
    namespace: &str,
    reconciler: Sets,
) -> Result<Wiring, Box<dyn std::error::Error + Send + Sync>> {
    let set_source = KubeSource::<ReplicaSet>::namespaced(client.clone(), namespace);
    let pod_source = KubeSource::<Pod>::namespaced(client.clone(), namespace);
    let (set_client, pod_client) = (set_source.client(), pod_source.client());
    let sets = Informer::builder(set_source).build()?;
    let pods = Informer::builder(pod_source)
        .index(OWNER, |pod: &Pod| {
            owner_of(pod).map(|o| o.to_string()).into_iter().collect()
        })
        .build()?;
    let controller = Controller::builder("replicasets", &sets, reconciler)
        .owns(&pods, owner_of)
        .client(set_client)
        .client(pod_client)
        .build()?;
    Ok(Wiring {
        sets,
        pods,
        controller,
    })
}

/// Whether every cached set has exactly its replicas of live pods, in the
/// caches of `sets` and `pods`.
pub fn converged(sets: &Informer<ReplicaSet>, pods: &Informer<Pod>) -> bool {
    let pods = pods.cache();
    sets.cache().list().iter().all(|set| {
        let want = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let have = pods
            .by_index(OWNER, &set.key().to_string())
            .unwrap_or_default()
            .iter()
            .filter(|pod| pod.deletion().is_none())
            .count();
        usize::try_from(want).is_ok_and(|want| want == have)
    })
}
