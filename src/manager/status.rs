//! What `/healthz`, `/readyz` and `/debug/queues` report.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;

use super::activity::{Activity, RunnableReport};
use super::erased::ControllerView;
use super::health::{StallLimits, Unhealthy, stuck_keys};
use super::informers::Informers;
use crate::informer::InformerId;
use crate::placement::{Leadership, ShardReport, Sharding};

/// How many in-flight keys `/debug/queues` lists per controller, and
/// `/healthz` per stuck controller.
pub(super) const OLDEST_KEYS: usize = 10;

/// The manager's live state, shared with the HTTP server.
///
/// Flags are atomics; the lists and `failed` are locks held only to copy
/// or change them, never across an `.await`.
pub(super) struct Status {
    pub(super) informers: Arc<Informers>,
    pub(super) controllers: Mutex<Vec<ControllerView>>,
    pub(super) activity: Arc<Activity>,
    /// When `/healthz` calls a key stuck or an informer stalled.
    pub(super) stalls: StallLimits,
    /// The leadership, with leader election.
    pub(super) leadership: Option<Leadership>,
    /// The sharding, when configured.
    pub(super) sharding: Option<Sharding>,
    /// Whether a standby (not leader) counts as ready.
    pub(super) standby_ready: bool,
    /// Not ready while an awaited informer lags longer than this.
    pub(super) ready_lag: Option<Duration>,
    pub(super) stopping: AtomicBool,
    pub(super) failed: Mutex<Option<String>>,
}

/// A probe's answer: healthy or not, and why.
pub(super) struct Probe {
    pub(super) ok: bool,
    pub(super) text: String,
}

impl Status {
    /// `/healthz`: no task has failed, no controller holds a key past its
    /// bound and no informer's source has failed past its bound (see
    /// [`StallLimits`]); one line per reason otherwise.
    pub(super) fn health(&self) -> Probe {
        let reasons = self.unhealthy(Instant::now());
        if reasons.is_empty() {
            return Probe {
                ok: true,
                text: "ok\n".to_owned(),
            };
        }
        let text = reasons.iter().map(|reason| format!("{reason}\n")).collect();
        Probe { ok: false, text }
    }

    fn unhealthy(&self, now: Instant) -> Vec<Unhealthy> {
        let mut reasons: Vec<_> = self
            .failed
            .lock()
            .clone()
            .map(Unhealthy::Failed)
            .into_iter()
            .collect();
        for controller in self.controllers.lock().iter() {
            let timeout = controller.reconcile_timeout;
            if let Some(bound) = self.stalls.key_bound(timeout) {
                let held = controller.queue.held_longer_than(Some(bound), OLDEST_KEYS);
                reasons.extend(stuck_keys(&controller.name, timeout, bound, held));
            }
        }
        for (name, informer) in self.informers.all() {
            reasons.extend(self.stalls.informer_stall(&name, &informer.stats(), now));
        }
        reasons
    }

    /// Each informer not synced that someone waits for, and each
    /// controller waiting for one.
    fn unsynced(&self) -> Vec<String> {
        let controllers = self.controllers.lock();
        let informers = self.informers.awaited(&optional_only(&controllers));
        let waiting: Vec<_> = informers
            .iter()
            .filter(|(_, informer)| !informer.is_synced())
            .collect();
        let mut reasons: Vec<String> = waiting
            .iter()
            .map(|(name, _)| format!("informer `{name}` has not synced"))
            .collect();
        for controller in controllers.iter() {
            let on: Vec<_> = waiting
                .iter()
                .filter(|(_, informer)| controller.required.contains(&informer.id()))
                .map(|(name, _)| format!("`{name}`"))
                .collect();
            if !on.is_empty() {
                reasons.push(format!(
                    "controller `{}` is waiting for {}",
                    controller.name,
                    on.join(", ")
                ));
            }
        }
        reasons
    }

    /// Each awaited informer that lags longer than the ready bound.
    fn lagging(&self) -> Vec<String> {
        let Some(bound) = self.ready_lag else {
            return Vec::new();
        };
        let controllers = self.controllers.lock();
        let informers = self.informers.awaited(&optional_only(&controllers));
        informers
            .iter()
            .filter_map(|(name, informer)| {
                let lag = informer.stats().lag.filter(|lag| lag.behind_for > bound)?;
                Some(format!(
                    "informer `{name}` lags its source: {} revisions behind for {:?} (bound {bound:?})",
                    lag.revisions, lag.behind_for
                ))
            })
            .collect()
    }

    /// `/readyz`: every cache synced, and leading (or a standby, if that
    /// counts as ready), and not shutting down.
    pub(super) fn readiness(&self) -> Probe {
        let mut reasons = Vec::new();
        if self.stopping.load(Ordering::Acquire) {
            reasons.push("shutting down".to_owned());
        }
        reasons.extend(self.unsynced());
        reasons.extend(self.lagging());
        let standby = self.leadership.as_ref().is_some_and(|l| !l.is_leader());
        if standby && !self.standby_ready {
            reasons.push("not the leader".to_owned());
        }
        if let Some(sharding) = self.sharding.as_ref().filter(|s| !s.waited_enough()) {
            match sharding.missing() {
                None => reasons.push("not a member yet".to_owned()),
                Some(0) => {}
                Some(missing) => {
                    reasons.push(format!("{missing} assigned shards not acquired yet"));
                }
            }
        }
        if reasons.is_empty() {
            Probe {
                ok: true,
                text: "ok\n".to_owned(),
            }
        } else {
            Probe {
                ok: false,
                text: format!("not ready: {}\n", reasons.join("; ")),
            }
        }
    }

    /// `/debug/queues`: per controller, the queue's counts and its oldest
    /// in-flight keys.
    pub(super) fn queues(&self) -> Vec<QueueReport> {
        self.controllers
            .lock()
            .iter()
            .map(|controller| {
                let stats = controller.queue.stats();
                QueueReport {
                    controller: controller.name.clone(),
                    placement: controller.placement.as_str(),
                    queued: stats.ready,
                    delayed: stats.scheduled,
                    in_flight: stats.in_flight,
                    oldest_in_flight: controller
                        .queue
                        .held_longer_than(None, OLDEST_KEYS)
                        .oldest
                        .into_iter()
                        .map(|(key, age)| InFlight {
                            key,
                            age_seconds: age.as_secs_f64(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// `/debug/shards`: the sharding as this replica sees it (`None`
    /// without sharding).
    pub(super) fn shards(&self) -> Option<ShardReport> {
        self.sharding.as_ref().map(Sharding::report)
    }

    /// `/debug/runnables`: every controller and task, its placement, and
    /// whether it is active here.
    pub(super) fn runnables(&self) -> Vec<RunnableReport> {
        self.activity.report()
    }

    pub(super) fn set_failed(&self, failure: String) {
        self.failed.lock().get_or_insert(failure);
    }
}

/// The informers some controller reads but none waits for (optional
/// sources only): no one waits for them to sync.
pub(super) fn optional_only(controllers: &[ControllerView]) -> Vec<InformerId> {
    let required: Vec<_> = controllers.iter().flat_map(|c| c.required.iter()).collect();
    let mut optional: Vec<InformerId> = controllers
        .iter()
        .flat_map(|c| c.informers.iter())
        .filter(|id| !required.contains(id))
        .copied()
        .collect();
    optional.dedup();
    optional
}

/// One controller's queue, as `/debug/queues` reports it.
#[derive(Debug, Serialize)]
pub(super) struct QueueReport {
    controller: String,
    placement: &'static str,
    queued: usize,
    delayed: usize,
    in_flight: usize,
    oldest_in_flight: Vec<InFlight>,
}

/// One in-flight key (as its user wrote it) and how long a worker has held
/// it.
#[derive(Debug, Serialize)]
struct InFlight {
    key: String,
    age_seconds: f64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::informer::Informer;
    use crate::manager::erased::SharedInformer;
    use crate::memory::MemoryStore;
    use crate::object::Revision;
    use crate::queue::WorkQueue;

    const MINUTE: Duration = Duration::from_secs(60);
    const MS: Duration = Duration::from_millis(1);

    #[derive(Debug, Clone)]
    struct Item {
        name: String,
        version: Revision,
    }

    crate::impl_object!(Item, key: name: String, version: version);

    fn status(
        controllers: Vec<ControllerView>,
        informers: Vec<(String, Arc<dyn SharedInformer>)>,
    ) -> Status {
        let registry = Informers::default();
        for (name, informer) in informers {
            let _ = registry.register(&name, informer, true);
        }
        Status {
            informers: Arc::new(registry),
            controllers: Mutex::new(controllers),
            activity: Arc::default(),
            stalls: StallLimits::DEFAULT,
            leadership: None,
            sharding: None,
            standby_ready: true,
            ready_lag: None,
            stopping: AtomicBool::new(false),
            failed: Mutex::new(None),
        }
    }

    fn widgets(queue: &WorkQueue<String>, reconcile_timeout: Option<Duration>) -> ControllerView {
        ControllerView {
            name: "widgets".to_owned(),
            placement: crate::placement::Placement::Everywhere,
            queue: Arc::new(queue.clone()),
            journal: Arc::new(crate::controller::Journal::<String>::default()),
            hot_keys: Arc::new(crate::controller::HotKeys::<String>::new("widgets", None)),
            footprint: Arc::new(crate::controller::TableSizes::default()),
            reconcile_timeout,
            informers: Vec::new(),
            required: Vec::new(),
        }
    }

    async fn take(queue: &WorkQueue<String>, key: &str) {
        queue.add(key.to_owned());
        assert_eq!(queue.get().await.as_deref(), Some(key));
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_while_a_key_is_held_past_three_reconcile_timeouts() {
        let queue = WorkQueue::new();
        let status = status(vec![widgets(&queue, Some(5 * MINUTE))], Vec::new());
        take(&queue, "item-00").await;
        tokio::time::advance(MINUTE).await;
        take(&queue, "item-01").await;

        tokio::time::advance(14 * MINUTE).await;
        let probe = status.health();
        assert_eq!((probe.ok, probe.text.as_str()), (true, "ok\n"));
        tokio::time::advance(MS).await;
        let probe = status.health();
        assert!(!probe.ok);
        assert_eq!(
            probe.text,
            "controller `widgets` is stuck: 1 key held longer than 900s (reconcile timeout \
             300s): `item-00` for 900.001s;\n"
        );
        tokio::time::advance(MINUTE).await;
        assert!(status.health().text.contains(
            "2 keys held longer than 900s (reconcile timeout 300s): `item-00` for 960.001s; \
             `item-01` for 900.001s;"
        ));

        queue.done(&"item-00".to_owned()).unwrap();
        queue.done(&"item-01".to_owned()).unwrap();
        assert!(status.health().ok, "healthy again once the keys are done");
    }

    #[tokio::test(start_paused = true)]
    async fn the_stuck_key_checks_follow_the_configured_bounds() {
        let queue = WorkQueue::new();
        let mut status = status(vec![widgets(&queue, None)], Vec::new());
        take(&queue, "item-00").await;
        tokio::time::advance(1000 * MINUTE).await;
        assert!(
            status.health().ok,
            "no timeout and no absolute bound: never stuck"
        );

        status.stalls.held = Some(MINUTE);
        assert_eq!(
            status.health().text,
            "controller `widgets` is stuck: 1 key held longer than 60s (no reconcile \
             timeout): `item-00` for 60000s;\n"
        );
        status.stalls = StallLimits::OFF;
        status.set_failed("task `x` failed".to_owned());
        assert_eq!(status.health().text, "failed: task `x` failed\n");
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_while_an_informers_source_fails_past_the_bound() {
        let store = MemoryStore::<Item>::new("items");
        store.fail_next_lists(u32::MAX);
        let informer = Informer::builder(store.clone()).build().unwrap();
        let shared: Arc<dyn SharedInformer> = Arc::new(informer.clone());
        let status = status(Vec::new(), vec![("items".to_owned(), shared)]);
        let cancel = CancellationToken::new();
        let run = tokio::spawn(SharedInformer::run(&informer, cancel.clone()));
        // Let the informer's task make (and fail) its first list.
        for _ in 0..100 {
            if informer.stats().failing_since.is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let since = informer
            .stats()
            .failing_since
            .expect("the first list failed");

        tokio::time::sleep_until(since + 15 * MINUTE).await;
        assert!(
            status.health().ok,
            "failing for exactly the bound is not yet stalled"
        );
        tokio::time::sleep(MS).await;
        let probe = status.health();
        assert!(!probe.ok);
        assert_eq!(
            probe.text,
            "informer `items` is stalled: its source has been failing for 900.001s (bound \
             900s), no progress since it started\n"
        );

        store.fail_next_lists(0);
        // The next list comes within the maximum backoff (30 s ± 20 %).
        tokio::time::sleep(MINUTE).await;
        assert!(informer.is_synced());
        assert!(status.health().ok, "healthy again after a successful list");
        cancel.cancel();
        run.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn readyz_fails_while_an_informer_lags_past_the_bound_and_recovers() {
        let store = MemoryStore::<Item>::new("items");
        store.put(Item {
            name: "a".to_owned(),
            version: Revision::ZERO,
        });
        let faults = crate::memory::Faults {
            seed: 3,
            delay: Some(Duration::from_secs(30)),
            ..crate::memory::Faults::default()
        };
        store.set_faults(faults).unwrap();
        let informer = Informer::builder(store.clone())
            .lag_probe_every(Duration::from_secs(1))
            .build()
            .unwrap();
        let shared: Arc<dyn SharedInformer> = Arc::new(informer.clone());
        let mut status = status(Vec::new(), vec![("items".to_owned(), shared)]);
        status.ready_lag = Some(Duration::from_secs(2));
        let cancel = CancellationToken::new();
        let run = tokio::spawn(SharedInformer::run(&informer, cancel.clone()));
        informer.wait_synced(MINUTE).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(status.readiness().ok, "{}", status.readiness().text);

        store.put(Item {
            name: "a".to_owned(),
            version: Revision::ZERO,
        });
        let head = store.revision();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            informer.stats().revision < head,
            "the seed delays the change past the bound"
        );
        let probe = status.readiness();
        assert!(!probe.ok);
        assert!(
            probe.text.starts_with(
                "not ready: informer `items` lags its source: 1 revisions behind for "
            ),
            "{}",
            probe.text
        );
        while informer.stats().revision < head {
            tokio::time::sleep(MS * 10).await;
        }
        assert!(
            status.readiness().ok,
            "ready again once the cache caught up"
        );
        cancel.cancel();
        run.await.unwrap().unwrap();
    }
}
