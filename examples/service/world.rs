//! The service example's world: pods whose readiness probes flip at
//! random, the events of its timeline, and the summary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::client::ClientError;
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, CancellationToken, Revision};

use crate::monitor::Stats;
use crate::route::{Counts, Endpoints, Pod, Service};
use crate::support::{Clock, Summary, verdict};

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
        if stop
            .run_until_cancelled(tokio::time::sleep(wait))
            .await
            .is_none()
        {
            return Ok(());
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

/// The stores and counters of one run: the tasks write them, the summary
/// reads them.
#[derive(Clone)]
pub(crate) struct World {
    pub(crate) services: MemoryStore<Service>,
    pub(crate) pods: MemoryStore<Pod>,
    pub(crate) endpoints: MemoryStore<Endpoints>,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) counts: Arc<Counts>,
}

impl World {
    /// Five pods of `web`, three of `api`, each ready or not at random.
    pub(crate) fn new() -> Self {
        let pods = MemoryStore::new("pods");
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
        Self {
            services: MemoryStore::new("services"),
            pods,
            endpoints: MemoryStore::new("endpoints"),
            stats: Arc::default(),
            counts: Arc::default(),
        }
    }

    /// The readiness probes, until the returned token is cancelled (before
    /// the end: the last 10 % show the loop settle) or the manager stops.
    pub(crate) fn add_probes(
        &self,
        manager: &mut Manager,
        clock: Clock,
    ) -> Result<CancellationToken, BoxError> {
        let probes = manager.shutdown_token().child_token();
        let (p, e, st, s) = (
            self.pods.clone(),
            self.endpoints.clone(),
            Arc::clone(&self.stats),
            probes.clone(),
        );
        manager.add_task("probes", move |_| run_probes(p, e, st, clock, s))?;
        Ok(probes)
    }

    /// A pod starts at 30 %, someone edits web's endpoints by hand at 50 %,
    /// a pod is deleted at 70 %, the probes stop at 90 %.
    pub(crate) async fn timeline(
        &self,
        clock: Clock,
        duration: Option<Duration>,
        probes: &CancellationToken,
    ) -> Result<(), ClientError> {
        clock.at(duration, 0.3).await;
        let api3 = pod("api-3", "api");
        self.pod_changed(&api3, api3.ready);
        self.pods.put(api3);
        println!("{} WORLD pod api-3 starts", clock.stamp());
        clock.at(duration, 0.5).await;
        self.endpoints.put(Endpoints {
            service: "web".into(),
            pods: vec!["web-9".into()],
            version: Revision::ZERO,
        });
        println!(
            "{} WORLD someone sets web's endpoints to [web-9] by hand",
            clock.stamp()
        );
        clock.at(duration, 0.7).await;
        let web4 = self.pods.get(&"web-4".to_owned()).expect("web-4 exists");
        self.pod_changed(&web4, false);
        self.pods.client().delete(&web4.name).await?;
        println!("{} WORLD pod web-4 is deleted", clock.stamp());
        clock.at(duration, 0.9).await;
        probes.cancel();
        println!("{} probes stop", clock.stamp());
        clock.at(duration, 1.0).await;
        Ok(())
    }

    /// The world is about to make `pod` `ready` (`false`: also gone).
    fn pod_changed(&self, pod: &Pod, ready: bool) {
        let routed = is_routed(&self.endpoints, pod);
        let mut stats = self.stats.lock().expect("not poisoned");
        stats.pod_changed(&pod.name, ready, routed);
    }

    pub(crate) fn summary(&self) -> Summary {
        let stats = self.stats.lock().expect("not poisoned");
        let all = self.pods.snapshot().objects;
        let mut finals = Vec::new();
        let mut converged = true;
        let mut names: Vec<Service> = self.services.snapshot().objects;
        names.sort_by(|a, b| b.name.cmp(&a.name));
        for service in names {
            let mut ready: Vec<String> = all
                .iter()
                .filter(|p| p.app == service.selector && p.ready)
                .map(|p| p.name.clone())
                .collect();
            ready.sort();
            let routed = self
                .endpoints
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
                self.counts.reconciles(),
                self.counts.updates()
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
}
