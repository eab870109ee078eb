//! The controller under test: each parent ConfigMap wants one dependent
//! Secret (`want: "1"`) or none (`"0"`); the dependents get generated
//! names, so a create made from a stale cache would be a duplicate. And
//! the watch that counts duplicates.

use std::collections::{BTreeMap, HashMap};
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

/// The annotation naming the leadership term (its fencing token) a
/// dependent was created in.
const TERM: &str = "tend.test/term";

/// A new dependent of `parent`, with a generated name, created in `term`.
fn dependent_of(parent: &ConfigMap, term: u64) -> Secret {
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
            annotations: Some(BTreeMap::from([(TERM.to_owned(), term.to_string())])),
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
            let term = ctx.fencing_token().map_or(0, |token| token.get());
            secrets.create(dependent_of(parent, term)).await?;
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

/// The term a dependent was created in.
fn term_of(secret: &Secret) -> Option<String> {
    secret.metadata.annotations.as_ref()?.get(TERM).cloned()
}

/// Counts, from a watch of every dependent, the times a parent had two
/// live dependents at once: created in one leadership term (a cache that
/// did not show the replica's own write: read-your-writes failed), or in
/// two (a deposed leader's create, sent before its deadline, landing after
/// another took over: Kubernetes has no server-side fencing).
pub(crate) struct Duplicates {
    pub(crate) same_term: Arc<AtomicUsize>,
    pub(crate) across_terms: Arc<AtomicUsize>,
    _subscription: Subscription<Secret>,
}

impl Duplicates {
    pub(crate) fn watch(informer: &Informer<Secret>) -> Self {
        let same_term = Arc::new(AtomicUsize::new(0));
        let across_terms = Arc::new(AtomicUsize::new(0));
        let (same, across) = (Arc::clone(&same_term), Arc::clone(&across_terms));
        let live: Mutex<HashMap<ObjectKey, HashMap<ObjectKey, Option<String>>>> =
            Mutex::new(HashMap::new());
        let subscription = informer.subscribe(move |event: &Event<Secret>| {
            let secret = event.object();
            let Some(parent) = owner_of(secret) else {
                return;
            };
            let mut live = live.lock();
            let set = live.entry(parent.clone()).or_default();
            if let Event::Deleted(_) = event {
                set.remove(&secret.key());
                return;
            }
            let term = term_of(secret);
            if set.insert(secret.key(), term.clone()).is_some() || set.len() < 2 {
                return;
            }
            let shared = set.iter().filter(|(_, t)| **t == term).count() > 1;
            eprintln!(
                "duplicate ({}): {parent} has {set:?}",
                if shared { "one term" } else { "two terms" }
            );
            let counter = if shared { &same } else { &across };
            counter.fetch_add(1, Ordering::Relaxed);
        });
        Self {
            same_term,
            across_terms,
            _subscription: subscription,
        }
    }

    /// Both counts: (in one term, across terms).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.same_term.load(Ordering::Relaxed),
            self.across_terms.load(Ordering::Relaxed),
        )
    }
}
