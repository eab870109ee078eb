//! Observe → compare → act for one website: its pods (owned children,
//! through owner references), its status, its DNS record (outside the
//! cluster, so a finalizer cleans it up) and the events that say what
//! the operator did.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kube::Resource;
use tend::client::{Client, ClientError};
use tend::controller::{
    Action, Context, ErrorPolicy, Finalize, FinalizerError, Reconciler, finalizer,
};
use tend::kube::k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use tend::kube::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tend::kube::{EventType, Occurrence, Recorder};
use tend::{Object, ObjectKey};

use crate::website::{Website, WebsiteStatus};

/// The finalizer that keeps a website until its DNS record is gone.
pub const FINALIZER: &str = "tend.example.com/dns-record";

/// The pods' index of their website (`namespace/name`).
pub const OWNER: &str = "website";

/// The website that controls `pod`, if any.
pub fn owner_of(pod: &Pod) -> Option<ObjectKey> {
    tend::kube::controller_of::<Website>(pod)
}

/// The DNS records the operator publishes: a stand-in for a provider's
/// API, outside the cluster (no owner reference can clean it up).
#[derive(Debug, Clone, Default)]
pub struct Dns(Arc<Mutex<BTreeMap<String, String>>>);

impl Dns {
    fn publish(&self, site: &ObjectKey) {
        let host = format!("{}.{}.example.com", site.name, site.namespace);
        self.0
            .lock()
            .expect("not poisoned")
            .insert(site.to_string(), host);
    }

    fn remove(&self, site: &ObjectKey) {
        self.0
            .lock()
            .expect("not poisoned")
            .remove(&site.to_string());
    }

    /// Whether `site` has a record.
    pub fn has(&self, site: &ObjectKey) -> bool {
        self.0
            .lock()
            .expect("not poisoned")
            .contains_key(&site.to_string())
    }
}

/// What the operator did.
#[derive(Debug, Default)]
pub struct Counts {
    pub reconciles: AtomicUsize,
    pub created: AtomicUsize,
    pub deleted: AtomicUsize,
    pub cleanups: AtomicUsize,
}

impl Counts {
    /// The summary's line.
    pub fn line(&self) -> String {
        let n = |count: &AtomicUsize| count.load(Ordering::Relaxed);
        format!(
            "operator: {} reconciles, {} pods created, {} deleted, {} cleanups",
            n(&self.reconciles),
            n(&self.created),
            n(&self.deleted),
            n(&self.cleanups),
        )
    }
}

/// The reconciler.
pub struct Websites {
    pub recorder: Recorder,
    pub dns: Dns,
    pub counts: Arc<Counts>,
}

impl Reconciler<Website> for Websites {
    type Error = FinalizerError<ClientError>;

    async fn reconcile(&self, ctx: Context<Website>) -> Result<Action, Self::Error> {
        self.counts.reconciles.fetch_add(1, Ordering::Relaxed);
        finalizer(&ctx, FINALIZER, |step| async {
            match step {
                Finalize::Apply(site) => self.apply(&ctx, &site).await,
                Finalize::Cleanup(site) => self.cleanup(&ctx, &site).await,
            }
        })
        .await
    }

    fn error_policy(&self, error: &Self::Error) -> ErrorPolicy {
        eprintln!("reconcile failed: {}", chain(error));
        // Throttled by the API server (429): wait as long as it asked.
        let throttled = error
            .retry_after()
            .or(error.handler_error().and_then(ClientError::retry_after));
        throttled.map_or(ErrorPolicy::Retry, ErrorPolicy::RetryAfter)
    }
}

impl Websites {
    /// Pods to `spec.replicas`, the DNS record, then the status.
    async fn apply(&self, ctx: &Context<Website>, site: &Website) -> Result<Action, ClientError> {
        let wanted = site.spec.replicas;
        let mut live = self.pods_of(ctx);
        let have = u32::try_from(live.len()).unwrap_or(u32::MAX);
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        for _ in have..wanted {
            pods.create(pod_for(site)).await?;
            self.counts.created.fetch_add(1, Ordering::Relaxed);
        }
        // Scale down: the newest first.
        live.sort_by_key(|pod| std::cmp::Reverse(pod.version()));
        let extra = live.len().saturating_sub(wanted as usize);
        self.delete_pods(&pods, &live[..extra]).await?;
        if have != wanted {
            self.record(ctx, site, "Scaled", &format!("{have} → {wanted} pods"));
        }
        self.dns.publish(ctx.key());
        let status =
            WebsiteStatus::new(site.status.as_ref(), wanted, wanted, site.meta().generation);
        if site.status.as_ref() != Some(&status) {
            let mut next = site.clone();
            next.status = Some(status);
            ctx.client::<Website>()
                .expect("the controller writes websites")
                .update_status(next)
                .await?;
        }
        Ok(Action::Done)
    }

    /// On deletion: the pods first (an API server without a garbage
    /// collector, as `--embedded` runs, would keep them), then the DNS
    /// record. Both steps are idempotent: a restart runs them again.
    async fn cleanup(&self, ctx: &Context<Website>, site: &Website) -> Result<Action, ClientError> {
        let pods = ctx.client::<Pod>().expect("the controller writes pods");
        self.delete_pods(&pods, &self.pods_of(ctx)).await?;
        self.dns.remove(ctx.key());
        self.counts.cleanups.fetch_add(1, Ordering::Relaxed);
        self.record(ctx, site, "Cleaned", "pods and DNS record removed");
        Ok(Action::Done)
    }

    /// The live pods of the website being reconciled, from the cache.
    fn pods_of(&self, ctx: &Context<Website>) -> Vec<Arc<Pod>> {
        let cache = ctx.cache::<Pod>().expect("the controller owns pods");
        let owned = cache
            .by_index(OWNER, &ctx.key().to_string())
            .unwrap_or_default();
        owned
            .into_iter()
            .filter(|p| p.deletion().is_none())
            .collect()
    }

    async fn delete_pods(
        &self,
        client: &Client<Pod>,
        pods: &[Arc<Pod>],
    ) -> Result<(), ClientError> {
        for pod in pods {
            match client.delete(&pod.key()).await {
                Ok(_) => _ = self.counts.deleted.fetch_add(1, Ordering::Relaxed),
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Queues an event (sent in the background, fenced by the election).
    fn record(&self, ctx: &Context<Website>, site: &Website, reason: &str, note: &str) {
        let event = Occurrence {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: reason.to_owned(),
            secondary: None,
        };
        let recorder = self.recorder.with_token(ctx.fencing_token());
        if let Err(error) = recorder.emit(&site.object_ref(&()), &event) {
            eprintln!("event for {} not queued: {error}", ctx.key());
        }
    }
}

/// `error` and its causes, on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        line = format!("{line}: {error}");
        cause = error.source();
    }
    line
}

/// A new pod of `site`, controlled by it.
fn pod_for(site: &Website) -> Pod {
    let name = site.metadata.name.clone().unwrap_or_default();
    let suffix: String = (0..5).map(|_| fastrand::lowercase()).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{suffix}")),
            namespace: site.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([("website".to_owned(), name)])),
            owner_references: tend::kube::controller_reference(site).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "web".to_owned(),
                image: Some(site.spec.image.clone()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}
