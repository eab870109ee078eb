//! A Service's endpoints follow the healthy pods: two services select
//! their pods by label, the pods' readiness probes flip them between ready
//! and not ready at random, pods come and go, and someone edits an
//! endpoints list by hand. The controller keeps each service's endpoints
//! exactly its ready pods; a monitor (`monitor.rs`) measures, from the
//! true state, how long an unready pod stayed routed. The pods, their
//! probes, the timeline and the summary are in `world.rs`.
//!
//! tend features: `reads` (the pods a service's reconcile reads through
//! `by_index` are recorded, and a pod that joins, leaves or changes under
//! its selector wakes it: no mapper, no index of the services), `owns` (an
//! endpoints list edited by hand is put back), `Context::cache` to
//! observe, and `Client::create_or_update` through the reconcile's client
//! to act, all under a `Manager`. With `--watches` the same relation is
//! wired by hand instead: `watches` with a mapper through an index of the
//! services by selector (`route.rs` has both;
//! `tests/read_tracking/service.rs` runs both under the same chaos).
//!
//! ```sh
//! cargo run --example service                  # ~6 s
//! cargo run --example service -- --duration 60
//! cargo run --example service -- --forever
//! cargo run --example service -- --watches     # the mapper instead
//! ```

mod monitor;
mod route;
#[path = "../support/mod.rs"]
mod support;
mod world;

use std::sync::Arc;

use tend::manager::Manager;
use tend::{BoxError, Informer, Revision};

use route::{Endpoints, Relation, Route, Service};
use support::Clock;
use world::World;

/// The three informers and the controller: it reads pods (or watches
/// them, `--watches`) and `owns` the endpoints, which it writes through
/// the reconcile's client. Returns the endpoints' informer, for the
/// monitor.
fn add_controller(
    manager: &mut Manager,
    world: &World,
    relation: Relation,
    clock: Clock,
) -> Result<Informer<Endpoints>, BoxError> {
    let services = manager.informer("services", || {
        route::services(world.services.clone(), relation)
    })?;
    let pods = manager.informer("pods", || route::pods(world.pods.clone()))?;
    let endpoints = manager.informer("endpoints", || {
        Informer::builder(world.endpoints.clone()).build()
    })?;
    let route = Route {
        counts: Arc::clone(&world.counts),
        say: Box::new(move |line| println!("{} {line}", clock.stamp())),
    };
    let controller = manager.controller("endpoints", &services, route);
    let controller = route::wire(controller, relation, &services, &pods, &endpoints)
        .client(world.endpoints.client())
        .build()?;
    manager.add_controller(controller)?;
    Ok(endpoints)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("service", 6.0);
    let relation = if std::env::args().any(|a| a == "--watches") {
        Relation::Watches
    } else {
        Relation::Reads
    };
    let clock = Clock::start();
    let world = World::new();
    let mut manager = Manager::builder().build()?;
    let endpoint_cache = add_controller(&mut manager, &world, relation, clock)?;
    let _monitor = monitor::subscribe(&endpoint_cache, &world);
    let stop = manager.shutdown_token();
    let probes = world.add_probes(&mut manager, clock)?;

    println!("relation: pods to services by {relation:?}");
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
