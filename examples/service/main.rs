//! A Service's endpoints follow the healthy pods: two services select
//! their pods by label, the pods' readiness probes flip them between ready
//! and not ready at random, pods come and go, and someone edits an
//! endpoints list by hand. The controller keeps each service's endpoints
//! exactly its ready pods; a monitor (`monitor.rs`) measures, from the
//! true state, how long an unready pod stayed routed. The pods, their
//! probes, the timeline and the summary are in `world.rs`.
//!
//! tend features: `watches` with a mapping through an index (a pod wakes
//! every service whose selector matches its label: `keys_by_index` on the
//! services' cache), `owns` (an endpoints list edited by hand is put
//! back), `Context::cache` and `by_index` to observe, and
//! `Client::create_or_update` through the reconcile's client to act, all
//! under a `Manager`.
//!
//! ```sh
//! cargo run --example service                  # ~6 s
//! cargo run --example service -- --duration 60
//! cargo run --example service -- --forever
//! ```

mod monitor;
#[path = "../support/mod.rs"]
mod support;
mod world;

use std::sync::{Arc, Mutex};

use tend::client::{ClientError, Effect};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::{BoxError, Informer, Revision};

use monitor::Stats;
use support::Clock;
use world::World;

/// The desired state: route to the ready pods labelled `selector`.
#[derive(Debug, Clone, PartialEq)]
struct Service {
    name: String,
    selector: String,
    version: Revision,
}

/// The world the service observes: a pod, ready or not.
#[derive(Debug, Clone, PartialEq)]
struct Pod {
    name: String,
    app: String,
    ready: bool,
    version: Revision,
}

/// What the controller writes: the pods a service routes to (sorted).
#[derive(Debug, Clone, PartialEq)]
struct Endpoints {
    service: String,
    pods: Vec<String>,
    version: Revision,
}

tend::impl_object!(Service, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);
tend::impl_object!(Endpoints, key: service: String, version: version);

/// Observe the service's pods and its endpoints, compare the ready pods
/// with the routed ones, act by writing the endpoints.
struct Route {
    clock: Clock,
    stats: Arc<Mutex<Stats>>,
}

impl Reconciler<Service> for Route {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Service>) -> Result<Action, ClientError> {
        self.stats.lock().expect("not poisoned").reconciles += 1;
        let endpoints = ctx.client::<Endpoints>().expect("writes endpoints");
        let Some(service) = ctx.object() else {
            // Deleted: nothing to route to any more.
            return match endpoints.delete(ctx.key()).await {
                Ok(_) | Err(ClientError::NotFound { .. }) => Ok(Action::Done),
                Err(error) => Err(error),
            };
        };
        let pods = ctx.cache::<Pod>().expect("the controller watches pods");
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
        self.stats.lock().expect("not poisoned").updates += 1;
        let added: Vec<&str> = diff(&ready, &routed);
        let removed: Vec<&str> = diff(&routed, &ready);
        println!(
            "{} reconcile {} ({}) | observe: {} pods, {} ready, {} routed | compare: route {}, unroute {} | act: endpoints [{}]",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
            selected.len(),
            ready.len(),
            routed.len(),
            list(&added),
            list(&removed),
            ready.join(" "),
        );
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

/// The three informers and the controller: it `watches` pods through the
/// services' selector index and `owns` the endpoints, which it writes
/// through the reconcile's client. Returns the endpoints' informer, for
/// the monitor.
fn add_controller(
    manager: &mut Manager,
    world: &World,
    clock: Clock,
) -> Result<Informer<Endpoints>, BoxError> {
    let service_cache = manager.informer("services", || {
        Informer::builder(world.services.clone())
            .index("selector", |s: &Service| vec![s.selector.clone()])
            .build()
    })?;
    let pod_cache = manager.informer("pods", || {
        Informer::builder(world.pods.clone())
            .index("app", |p: &Pod| vec![p.app.clone()])
            .build()
    })?;
    let endpoint_cache = manager.informer("endpoints", || {
        Informer::builder(world.endpoints.clone()).build()
    })?;
    let route = Route {
        clock,
        stats: Arc::clone(&world.stats),
    };
    let selecting = service_cache.cache();
    let controller = manager
        .controller("endpoints", &service_cache, route)
        .watches(&pod_cache, move |pod: &Pod| {
            selecting
                .keys_by_index("selector", &pod.app)
                .unwrap_or_default()
        })
        .owns(&endpoint_cache, |e: &Endpoints| Some(e.service.clone()))
        .client(world.endpoints.client())
        .build()?;
    manager.add_controller(controller)?;
    Ok(endpoint_cache)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("service", 6.0);
    let clock = Clock::start();
    let world = World::new();
    let mut manager = Manager::builder().build()?;
    let endpoint_cache = add_controller(&mut manager, &world, clock)?;
    let _monitor = monitor::subscribe(&endpoint_cache, &world);
    let stop = manager.shutdown_token();
    let probes = world.add_probes(&mut manager, clock)?;

    for (name, selector) in [("web", "web"), ("api", "api")] {
        println!("declare: Service {name} routes to the ready pods labelled app={selector}");
        let service = Service {
            name: name.into(),
            selector: selector.into(),
            version: Revision::ZERO,
        };
        world.services.client().create(service).await?;
    }
    let running = tokio::spawn(manager.run());
    support::play(&stop, world.timeline(clock, duration, &probes)).await?;
    running.await??;
    println!("{}", world.summary());
    Ok(())
}
