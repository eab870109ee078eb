//! The service example's objects, its reconciler and the two ways it can
//! be woken by pods: shared by `examples/service` and
//! `tests/read_tracking/service.rs`, which runs both under the same chaos.

#![allow(dead_code, unreachable_pub)] // the test uses a part

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tend::client::{ClientError, Effect};
use tend::controller::{Action, Context, ControllerBuilder, Reconciler};
use tend::{Informer, InformerError, Revision, Source};

/// The desired state: route to the ready pods labelled `selector`.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub selector: String,
    pub version: Revision,
}

/// The world the service observes: a pod, ready or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    pub name: String,
    pub app: String,
    pub ready: bool,
    pub version: Revision,
}

/// What the controller writes: the pods a service routes to (sorted).
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoints {
    pub service: String,
    pub pods: Vec<String>,
    pub version: Revision,
}

tend::impl_object!(Service, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);
tend::impl_object!(Endpoints, key: service: String, version: version);

/// How a pod's change reaches the services that select it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// `reads`: the controller records that a service's reconcile read the
    /// pods under its selector (`by_index("app", …)`), and a pod that
    /// joins, leaves or changes there wakes it. Nothing else to write.
    Reads,
    /// `watches`, with a mapper through an index of the services by
    /// selector: a pod wakes every service whose selector is its app.
    Watches,
}

/// The services' informer: indexed by selector for `watches`' mapper.
pub fn services<S: Source<Object = Service>>(
    source: S,
    relation: Relation,
) -> Result<Informer<Service>, InformerError> {
    let builder = Informer::builder(source);
    match relation {
        Relation::Reads => builder.build(),
        Relation::Watches => builder
            .index("selector", |s: &Service| vec![s.selector.clone()])
            .build(),
    }
}

/// The pods' informer, indexed by app: what reconciles read.
pub fn pods<S: Source<Object = Pod>>(source: S) -> Result<Informer<Pod>, InformerError> {
    Informer::builder(source)
        .index("app", |p: &Pod| vec![p.app.clone()])
        .build()
}

/// Wakes the controller's services for their pods by `relation`, and for
/// their endpoints (`owns`: a hand edit is put back).
pub fn wire<R: Reconciler<Service>>(
    controller: ControllerBuilder<Service, R>,
    relation: Relation,
    services: &Informer<Service>,
    pods: &Informer<Pod>,
    endpoints: &Informer<Endpoints>,
) -> ControllerBuilder<Service, R> {
    let controller = match relation {
        Relation::Reads => controller.reads(pods),
        Relation::Watches => {
            let selecting = services.cache();
            controller.watches(pods, move |pod: &Pod| {
                selecting
                    .keys_by_index("selector", &pod.app)
                    .unwrap_or_default()
            })
        }
    };
    controller.owns(endpoints, |e: &Endpoints| Some(e.service.clone()))
}

/// What the controller did.
#[derive(Debug, Default)]
pub struct Counts {
    pub reconciles: AtomicU32,
    pub updates: AtomicU32,
}

impl Counts {
    pub fn reconciles(&self) -> u32 {
        self.reconciles.load(Ordering::Relaxed)
    }

    pub fn updates(&self) -> u32 {
        self.updates.load(Ordering::Relaxed)
    }
}

/// Observe the service's pods and its endpoints, compare the ready pods
/// with the routed ones, act by writing the endpoints; `say` gets a line
/// per update.
pub struct Route {
    pub counts: Arc<Counts>,
    pub say: Box<dyn Fn(String) + Send + Sync>,
}

impl Reconciler<Service> for Route {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Service>) -> Result<Action, ClientError> {
        self.counts.reconciles.fetch_add(1, Ordering::Relaxed);
        let endpoints = ctx.client::<Endpoints>().expect("writes endpoints");
        let Some(service) = ctx.object() else {
            // Deleted: nothing to route to any more.
            return match endpoints.delete(ctx.key()).await {
                Ok(_) | Err(ClientError::NotFound { .. }) => Ok(Action::Done),
                Err(error) => Err(error),
            };
        };
        let pods = ctx.cache::<Pod>().expect("the controller reads pods");
        let selected = pods
            .by_index("app", &service.selector)
            .expect("the pods' cache has an `app` index");
        let mut ready: Vec<String> = selected
            .iter()
            .filter(|p| p.ready)
            .map(|p| p.name.clone())
            .collect();
        ready.sort();
        let routed = ctx
            .cache::<Endpoints>()
            .and_then(|s| s.get(ctx.key()))
            .map(|e| e.pods.clone())
            .unwrap_or_default();
        if routed == ready {
            return Ok(Action::Done); // most wake-ups: a pod of another kind
        }
        let wanted = Endpoints {
            service: ctx.key().clone(),
            pods: ready.clone(),
            version: Revision::ZERO,
        };
        let written = endpoints
            .create_or_update(wanted, |e| e.pods.clone_from(&ready))
            .await?;
        if written.effect == Effect::Unchanged {
            return Ok(Action::Done); // our own write, not yet in the cache
        }
        self.counts.updates.fetch_add(1, Ordering::Relaxed);
        (self.say)(format!(
            "reconcile {} ({}) | observe: {} pods, {} ready, {} routed | compare: route {}, unroute {} | act: endpoints [{}]",
            ctx.key(),
            ctx.triggers(),
            selected.len(),
            ready.len(),
            routed.len(),
            list(&diff(&ready, &routed)),
            list(&diff(&routed, &ready)),
            ready.join(" "),
        ));
        Ok(Action::Done)
    }
}

/// The names in `a` that are not in `b`.
fn diff<'a>(a: &'a [String], b: &[String]) -> Vec<&'a str> {
    a.iter()
        .filter(|name| !b.contains(name))
        .map(String::as_str)
        .collect()
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(" ")
    }
}
