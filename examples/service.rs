//! A Service's endpoints follow the healthy pods: two services select
//! their pods by label, the pods' readiness probes flip them between ready
//! and not ready at random, pods come and go, and someone edits an
//! endpoints list by hand. The controller keeps each service's endpoints
//! exactly its ready pods; a monitor measures, from the true state, how
//! long an unready pod stayed routed.
//!
//! tend features: `watches` with a mapping through an index (a pod wakes
//! every service whose selector matches its label: `keys_by_index` on the
//! services' cache), `owns` (an endpoints list edited by hand is put
//! back), `Context::cache` and `by_index` to observe, and
//! `Client::create_or_update` to act, all under a `Manager`.
//!
//! ```sh
//! cargo run --example service                  # ~6 s
//! cargo run --example service -- --duration 60
//! cargo run --example service -- --forever
//! ```

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::{Client, ClientError, Effect};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken, Event, Informer, Revision};
use tokio::time::Instant;

use support::{Clock, Summary, verdict};

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
    endpoints: Client<Endpoints>,
    clock: Clock,
    stats: Arc<Mutex<Stats>>,
}

impl Reconciler<Service> for Route {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Service>) -> Result<Action, ClientError> {
        self.stats.lock().expect("not poisoned").reconciles += 1;
        let Some(service) = ctx.object() else {
            // Deleted: nothing to route to any more.
            return match self.endpoints.delete(ctx.key()).await {
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
        let written = self
            .endpoints
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

#[derive(Debug, Default)]
struct Stats {
    reconciles: u32,
    updates: u32,
    flips: u32,
    /// Pods routed while not ready (or gone), since when, by name.
    unready_routed: HashMap<String, Instant>,
    /// Ready pods not routed, since when, by name.
    ready_unrouted: HashMap<String, Instant>,
    /// How long routed pods stayed unready, each time one was.
    routed_unready: Vec<Duration>,
    /// The longest a ready pod waited to be routed.
    longest_unrouted: Duration,
}

impl Stats {
    /// The world changed `pod`: from now on it is `ready` (`false`: also
    /// gone), and it is `routed` now. Called by the writer, right before
    /// its write: the clock starts with the write itself.
    fn pod_changed(&mut self, pod: &str, ready: bool, routed: bool) {
        let now = Instant::now();
        if let Some(since) = self.unready_routed.remove(pod) {
            self.routed_unready.push(now - since); // ready again before unrouted
        }
        if let Some(since) = self.ready_unrouted.remove(pod) {
            self.longest_unrouted = self.longest_unrouted.max(now - since);
        }
        if !ready && routed {
            self.unready_routed.insert(pod.to_owned(), now);
        } else if ready && !routed {
            self.ready_unrouted.insert(pod.to_owned(), now);
        }
    }

    /// The endpoints of a service with pods `prefix-*` were written: the
    /// clocks of the pods they now route right (seen through an informer,
    /// so a little late: the figures are upper bounds).
    fn routed(&mut self, prefix: &str, pods: &[String], ready: impl Fn(&str) -> bool) {
        let now = Instant::now();
        let ours = |pod: &String| pod.starts_with(prefix);
        let unrouted: Vec<String> = self
            .unready_routed
            .keys()
            .filter(|p| ours(p) && !pods.contains(p))
            .cloned()
            .collect();
        for pod in unrouted {
            let since = self.unready_routed.remove(&pod).expect("listed");
            self.routed_unready.push(now - since);
        }
        let routed: Vec<String> = self
            .ready_unrouted
            .keys()
            .filter(|p| ours(p) && pods.contains(p))
            .cloned()
            .collect();
        for pod in routed {
            let since = self.ready_unrouted.remove(&pod).expect("listed");
            self.longest_unrouted = self.longest_unrouted.max(now - since);
        }
        // A hand edit routes pods that may be unready: their clock starts.
        for pod in pods.iter().filter(|p| !ready(p)) {
            self.unready_routed.entry(pod.clone()).or_insert(now);
        }
    }
}

/// Whether `pod` is routed now, read from the endpoints store (the truth).
fn is_routed(endpoints: &MemoryStore<Endpoints>, pod: &Pod) -> bool {
    endpoints
        .get(&pod.app)
        .is_some_and(|e| e.pods.contains(&pod.name))
}

/// Readiness probes: every 100–300 ms a random pod turns ready or not.
async fn run_probes(
    pods: MemoryStore<Pod>,
    endpoints: MemoryStore<Endpoints>,
    stats: Arc<Mutex<Stats>>,
    clock: Clock,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let wait = Duration::from_millis(fastrand::u64(100..300));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return Ok(()),
        }
        let all = pods.snapshot().objects;
        let Some(pod) = fastrand::choice(&all) else {
            continue;
        };
        let ready = !pod.ready;
        {
            let mut stats = stats.lock().expect("not poisoned");
            stats.flips += 1;
            stats.pod_changed(&pod.name, ready, is_routed(&endpoints, pod));
        }
        // The kubelet writes pods' status: an outside actor.
        pods.put(Pod {
            ready,
            ..pod.clone()
        });
        let state = if ready { "ready" } else { "not ready" };
        println!("{} WORLD pod {} is {state}", clock.stamp(), pod.name);
    }
}

fn pod(name: &str, app: &str) -> Pod {
    Pod {
        name: name.to_owned(),
        app: app.to_owned(),
        ready: fastrand::bool(),
        version: Revision::ZERO,
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("service", 6.0);
    let clock = Clock::start();
    let stats = Arc::new(Mutex::new(Stats::default()));
    let services = MemoryStore::<Service>::new("services");
    let pods = MemoryStore::<Pod>::new("pods");
    let endpoints = MemoryStore::<Endpoints>::new("endpoints");
    for (name, app) in [
        ("web-0", "web"),
        ("web-1", "web"),
        ("web-2", "web"),
        ("web-3", "web"),
        ("web-4", "web"),
        ("api-0", "api"),
        ("api-1", "api"),
        ("api-2", "api"),
    ] {
        pods.put(pod(name, app));
    }

    let mut manager = Manager::builder().build()?;
    let service_cache = manager.informer("services", || {
        Informer::builder(services.clone())
            .index("selector", |s: &Service| vec![s.selector.clone()])
            .build()
    })?;
    let pod_cache = manager.informer("pods", || {
        Informer::builder(pods.clone())
            .index("app", |p: &Pod| vec![p.app.clone()])
            .build()
    })?;
    let endpoint_cache =
        manager.informer("endpoints", || Informer::builder(endpoints.clone()).build())?;
    let route = Route {
        endpoints: endpoints.client(),
        clock,
        stats: Arc::clone(&stats),
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
        .build()?;
    manager.add_controller(controller)?;
    // The monitor: every write of an endpoints list stops the clocks of
    // the pods it now routes right.
    let _monitor = endpoint_cache.subscribe({
        let (stats, pods) = (Arc::clone(&stats), pods.clone());
        move |event| {
            let Event::Applied { new, .. } = event else {
                return;
            };
            let ready = |name: &str| pods.get(&name.to_owned()).is_some_and(|p| p.ready);
            let prefix = format!("{}-", new.service);
            let mut stats = stats.lock().expect("not poisoned");
            stats.routed(&prefix, &new.pods, ready);
        }
    });
    // Stopped before the end (the last 10 % show the loop settle), or by
    // the manager's shutdown.
    let stop = manager.shutdown_token();
    let probes = stop.child_token();
    let (p, e, st, s) = (
        pods.clone(),
        endpoints.clone(),
        Arc::clone(&stats),
        probes.clone(),
    );
    manager.add_task("probes", move |_| run_probes(p, e, st, clock, s))?;

    for (name, selector) in [("web", "web"), ("api", "api")] {
        println!("declare: Service {name} routes to the ready pods labelled app={selector}");
        let service = Service {
            name: name.into(),
            selector: selector.into(),
            version: Revision::ZERO,
        };
        services.client().create(service).await?;
    }
    let running = tokio::spawn(manager.run());
    support::play(&stop, async {
        clock.at(duration, 0.3).await;
        let api3 = pod("api-3", "api");
        let routed = is_routed(&endpoints, &api3);
        stats
            .lock()
            .expect("not poisoned")
            .pod_changed("api-3", api3.ready, routed);
        pods.put(api3);
        println!("{} WORLD pod api-3 starts", clock.stamp());
        clock.at(duration, 0.5).await;
        endpoints.put(Endpoints {
            service: "web".into(),
            pods: vec!["web-9".into()],
            version: Revision::ZERO,
        });
        println!(
            "{} WORLD someone sets web's endpoints to [web-9] by hand",
            clock.stamp()
        );
        clock.at(duration, 0.7).await;
        let web4 = pods.get(&"web-4".to_owned()).expect("web-4 exists");
        let routed = is_routed(&endpoints, &web4);
        stats
            .lock()
            .expect("not poisoned")
            .pod_changed("web-4", false, routed);
        pods.client().delete(&"web-4".to_owned()).await?;
        println!("{} WORLD pod web-4 is deleted", clock.stamp());
        clock.at(duration, 0.9).await;
        probes.cancel();
        println!("{} probes stop", clock.stamp());
        clock.at(duration, 1.0).await;
        Ok::<_, BoxError>(())
    })
    .await?;
    running.await??;
    println!("{}", summarize(&services, &pods, &endpoints, &stats));
    Ok(())
}

fn summarize(
    services: &MemoryStore<Service>,
    pods: &MemoryStore<Pod>,
    endpoints: &MemoryStore<Endpoints>,
    stats: &Mutex<Stats>,
) -> Summary {
    let stats = stats.lock().expect("not poisoned");
    let all = pods.snapshot().objects;
    let mut finals = Vec::new();
    let mut converged = true;
    let mut names: Vec<Service> = services.snapshot().objects;
    names.sort_by(|a, b| b.name.cmp(&a.name));
    for service in names {
        let mut ready: Vec<String> = all
            .iter()
            .filter(|p| p.app == service.selector && p.ready)
            .map(|p| p.name.clone())
            .collect();
        ready.sort();
        let routed = endpoints
            .get(&service.name)
            .map(|e| e.pods)
            .unwrap_or_default();
        converged &= routed == ready;
        let selected = all.iter().filter(|p| p.app == service.selector).count();
        finals.push(format!(
            "{} routes {} of {selected} pods ({} ready)",
            service.name,
            routed.len(),
            ready.len()
        ));
    }
    let longest = stats
        .routed_unready
        .iter()
        .max()
        .copied()
        .unwrap_or_default();
    Summary::default()
        .line(format!(
            "world: {} readiness flips, 1 pod started, 1 deleted, 1 hand edit of the endpoints",
            stats.flips
        ))
        .line(format!(
            "controller: {} reconciles, {} endpoint updates",
            stats.reconciles, stats.updates
        ))
        .line(format!(
            "longest time an unready pod stayed routed: {longest:.2?} (it happened {} times)",
            stats.routed_unready.len()
        ))
        .line(format!(
            "longest time a ready pod waited to be routed: {:.2?}",
            stats.longest_unrouted
        ))
        .line(format!(
            "final: {}: {}",
            finals.join(", "),
            verdict(converged, "converged")
        ))
}
