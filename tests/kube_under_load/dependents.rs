//! The controller under test: each parent ConfigMap wants one dependent
//! Secret (`want: "1"`) or none (`"0"`); the dependents get generated
//! names, so a create made from a stale cache would be a duplicate. And
//! the watch that counts duplicates.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ObjectMeta;
use parking_lot::Mutex;
use tend::client::ClientError;
use tend::controller::{Action, Context, Reconciler};
use tend::kube::{KubeElection, KubeSource};
use tend::manager::{Manager, ManagerError};
use tend::{Event, Informer, Object, ObjectKey, Subscription};
use tokio::task::JoinHandle;

use crate::timing;

/// The dependents' index of their parent (`namespace/name`).
const OWNER: &str = "owner";

fn owner_of(secret: &Secret) -> Option<ObjectKey> {
    tend::kube::controller_of::<ConfigMap>(secret)
}

/// Whether `parent` wants a dependent.
pub(crate) fn wants(parent: &ConfigMap) -> bool {
    parent
        .data
        .as_ref()
        .and_then(|data| data.get("want"))
        .is_some_and(|want| want == "1")
}

/// A new dependent of `parent`, with a generated name.
fn dependent_of(parent: &ConfigMap) -> Secret {
    let name = parent.metadata.name.clone().unwrap_or_default();
    let suffix: String = (0..6).map(|_| fastrand::lowercase()).collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{suffix}")),
            namespace: parent.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                "role".to_owned(),
                "dependent".to_owned(),
            )])),
            owner_references: tend::kube::controller_reference(parent).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

/// Keeps each parent's dependents at what it wants, trusting its cache
/// (read-your-writes; no hand-written expectations).
pub(crate) struct Dependents {
    pub(crate) created: Arc<AtomicUsize>,
}

impl Reconciler<ConfigMap> for Dependents {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, ClientError> {
        let Some(parent) = ctx.object() else {
            return Ok(Action::Done);
        };
        let cache = ctx.cache::<Secret>().expect("the controller owns secrets");
        let secrets = ctx
            .client::<Secret>()
            .expect("the controller writes secrets");
        let live = cache
            .by_index(OWNER, &ctx.key().to_string())
            .unwrap_or_default();
        let keep = usize::from(wants(parent));
        if live.len() < keep {
            secrets.create(dependent_of(parent)).await?;
            self.created.fetch_add(1, Ordering::Relaxed);
        }
        for extra in live.iter().skip(keep) {
            match secrets.delete(&extra.key()).await {
                Ok(_) => {}
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(Action::Done)
    }
}

/// One running replica: a manager leading through a Lease, its informers
/// (parents, dependents) and the controller, all on one client.
pub(crate) struct Replica {
    pub(crate) parents: Informer<ConfigMap>,
    pub(crate) dependents: Informer<Secret>,
    pub(crate) running: JoinHandle<Result<(), ManagerError>>,
}

pub(crate) fn replica(
    client: &kube::Client,
    namespace: &str,
    id: &str,
    created: &Arc<AtomicUsize>,
) -> Replica {
    let election = KubeElection::builder(client.clone(), namespace, crate::LEASE)
        .identity(id)
        .config(timing())
        .build()
        .expect("a valid candidate");
    let parent_source =
        KubeSource::<ConfigMap>::namespaced(client.clone(), namespace).labels("role=parent");
    let dependent_source =
        KubeSource::<Secret>::namespaced(client.clone(), namespace).labels("role=dependent");
    let writes = dependent_source.client_fenced_by(&election);
    let mut manager = Manager::builder()
        .leader_election(election)
        .campaign_again(true)
        .without_signals()
        .build()
        .expect("a valid manager");
    let parents = manager
        .informer("parents", || Informer::builder(parent_source).build())
        .expect("registered");
    let dependents = manager
        .informer("dependents", || {
            Informer::builder(dependent_source)
                .index(OWNER, |s: &Secret| {
                    owner_of(s).map(|o| o.to_string()).into_iter().collect()
                })
                .build()
        })
        .expect("registered");
    let reconciler = Dependents {
        created: Arc::clone(created),
    };
    let controller = manager
        .controller("dependents", &parents, reconciler)
        .owns(&dependents, owner_of)
        .client(writes)
        .build()
        .expect("a valid controller");
    manager.add_controller(controller).expect("added");
    Replica {
        parents,
        dependents,
        running: tokio::spawn(manager.run()),
    }
}

/// Counts, from a watch of every dependent, the times a parent had two
/// live dependents at once.
pub(crate) struct Duplicates {
    pub(crate) count: Arc<AtomicUsize>,
    _subscription: Subscription<Secret>,
}

impl Duplicates {
    pub(crate) fn watch(informer: &Informer<Secret>) -> Self {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        let live: Mutex<HashMap<ObjectKey, HashSet<ObjectKey>>> = Mutex::new(HashMap::new());
        let subscription = informer.subscribe(move |event: &Event<Secret>| {
            let secret = event.object();
            let Some(parent) = owner_of(secret) else {
                return;
            };
            let mut live = live.lock();
            let set = live.entry(parent.clone()).or_default();
            match event {
                Event::Deleted(_) => drop(set.remove(&secret.key())),
                _ if set.insert(secret.key()) && set.len() > 1 => {
                    eprintln!("duplicate: {parent} has {set:?}");
                    seen.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        });
        Self {
            count,
            _subscription: subscription,
        }
    }
}
