//! The service example's monitor: how long a pod stays routed while
//! unready, and a ready pod unrouted, timed from the world's writes (the
//! truth) to the endpoints written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tend::{Event, Informer, Subscription};
use tokio::time::Instant;

use crate::route::Endpoints;
use crate::world::World;

/// What the controller and the world did, and the routing clocks.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) flips: u32,
    /// Pods routed while not ready (or gone), since when, by name.
    unready_routed: HashMap<String, Instant>,
    /// Ready pods not routed, since when, by name.
    ready_unrouted: HashMap<String, Instant>,
    /// How long routed pods stayed unready, each time one was.
    pub(crate) routed_unready: Vec<Duration>,
    /// The longest a ready pod waited to be routed.
    pub(crate) longest_unrouted: Duration,
}

impl Stats {
    /// The world changed `pod`: from now on it is `ready` (`false`: also
    /// gone), and it is `routed` now. Called by the writer, right before
    /// its write: the clock starts with the write itself.
    pub(crate) fn pod_changed(&mut self, pod: &str, ready: bool, routed: bool) {
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

/// Every write of an endpoints list stops the clocks of the pods it now
/// routes right.
pub(crate) fn subscribe(endpoints: &Informer<Endpoints>, world: &World) -> Subscription<Endpoints> {
    let (stats, pods) = (Arc::clone(&world.stats), world.pods.clone());
    endpoints.subscribe(move |event| {
        let Event::Applied { new, .. } = event else {
            return;
        };
        let ready = |name: &str| pods.get(&name.to_owned()).is_some_and(|p| p.ready);
        let prefix = format!("{}-", new.service);
        let mut stats = stats.lock().expect("not poisoned");
        stats.routed(&prefix, &new.pods, ready);
    })
}
