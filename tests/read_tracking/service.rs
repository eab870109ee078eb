//! The service example's pod-to-service relation by tracked reads
//! (`reads`) against the hand-wired one (`watches` with a mapper through
//! an index): under the same seeded chaos (readiness flips, pods created,
//! deleted and moved between apps, endpoints edited by hand), both end
//! with every service routing exactly its ready pods, after the same
//! number of reconciles within one. Paused clock.

#[path = "../../examples/service/route.rs"]
mod route;

use std::sync::Arc;
use std::time::Duration;

use tend::controller::Controller;
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision};

use route::{Counts, Endpoints, Pod, Relation, Route, Service};

const STEPS: usize = 300;
const APPS: [&str; 3] = ["web", "api", "db"];

struct Stores {
    services: MemoryStore<Service>,
    pods: MemoryStore<Pod>,
    endpoints: MemoryStore<Endpoints>,
}

/// Runs the chaos of `seed` against the controller wired by `relation`:
/// its reconciles, and whether every service routes its ready pods.
async fn run(relation: Relation, seed: u64) -> (u32, Result<(), String>) {
    let stores = Stores {
        services: MemoryStore::new("services"),
        pods: MemoryStore::new("pods"),
        endpoints: MemoryStore::new("endpoints"),
    };
    for app in ["web", "api"] {
        stores.services.put(Service {
            name: app.to_owned(),
            selector: app.to_owned(),
            version: Revision::ZERO,
        });
    }
    let services = route::services(stores.services.clone(), relation).unwrap();
    let pods = route::pods(stores.pods.clone()).unwrap();
    let endpoints = Informer::builder(stores.endpoints.clone()).build().unwrap();
    let counts = Arc::new(Counts::default());
    let reconciler = Route {
        counts: Arc::clone(&counts),
        say: Box::new(drop),
    };
    let controller = Controller::builder("endpoints", &services, reconciler);
    let controller = route::wire(controller, relation, &services, &pods, &endpoints)
        .client(stores.endpoints.client())
        .build()
        .unwrap();
    let mut harness = Harness::new();
    harness.informer(&services);
    harness.informer(&pods);
    harness.informer(&endpoints);
    harness.controller(controller);
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..STEPS {
        tokio::time::sleep(Duration::from_millis(rng.u64(0..40))).await;
        chaos(&stores, &mut rng).await;
    }
    harness
        .settle(Duration::from_secs(60))
        .await
        .expect("settles");
    let converged = converged(&stores);
    harness.shutdown().await.unwrap();
    (counts.reconciles(), converged)
}

/// One step of chaos, from `rng` alone (pods in name order): the same
/// steps for both relations.
async fn chaos(stores: &Stores, rng: &mut fastrand::Rng) {
    let mut all = stores.pods.snapshot().objects;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let picked = (!all.is_empty()).then(|| all[rng.usize(..all.len())].clone());
    match (rng.u8(0..20), picked) {
        (0..=1, _) | (_, None) => {
            let name = format!("pod-{}", rng.u32(..1000));
            let app = APPS[rng.usize(..APPS.len())].to_owned();
            let ready = rng.bool();
            let version = Revision::ZERO;
            stores.pods.put(Pod {
                name,
                app,
                ready,
                version,
            });
        }
        (2..=3, Some(pod)) => {
            let _ = stores.pods.client().delete(&pod.name).await;
        }
        (4, Some(pod)) => {
            let app = APPS[rng.usize(..APPS.len())].to_owned();
            stores.pods.put(Pod { app, ..pod });
        }
        (5, _) => {
            stores.endpoints.put(Endpoints {
                service: ["web", "api"][rng.usize(..2)].to_owned(),
                pods: vec!["pod-by-hand".to_owned()],
                version: Revision::ZERO,
            });
        }
        (_, Some(pod)) => {
            stores.pods.put(Pod {
                ready: !pod.ready,
                ..pod
            });
        }
    }
}

/// Whether every service routes exactly its ready pods (from the stores).
fn converged(stores: &Stores) -> Result<(), String> {
    let pods = stores.pods.snapshot().objects;
    for service in stores.services.snapshot().objects {
        let mut ready: Vec<String> = pods
            .iter()
            .filter(|p| p.app == service.selector && p.ready)
            .map(|p| p.name.clone())
            .collect();
        ready.sort();
        let routed = stores.endpoints.get(&service.name).map(|e| e.pods);
        if routed.unwrap_or_default() != ready {
            return Err(format!("{} does not route {ready:?}", service.name));
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn tracked_reads_reach_the_same_state_as_the_mapper_with_as_many_reconciles() {
    for seed in [1, 2, 3] {
        let (by_reads, reads_converged) = run(Relation::Reads, seed).await;
        let (by_mapper, mapper_converged) = run(Relation::Watches, seed).await;
        println!("seed {seed}: {by_reads} by reads, {by_mapper} by the mapper");
        assert_eq!(
            mapper_converged,
            Ok(()),
            "seed {seed}: the mapper converged"
        );
        assert_eq!(
            reads_converged,
            Ok(()),
            "seed {seed}: tracked reads converged"
        );
        assert!(
            by_reads.abs_diff(by_mapper) <= 1,
            "seed {seed}: {by_reads} reconciles by reads, {by_mapper} by the mapper"
        );
        assert!(
            by_reads > STEPS as u32 / 4,
            "seed {seed}: the chaos woke the services"
        );
    }
}
