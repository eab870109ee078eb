//! Prometheus metrics with the names and labels of controller-runtime and
//! client-go, so that existing dashboards and alerts work unchanged.
//!
//! Counters are registered without their `_total` suffix: prometheus-client
//! appends it. Reconcile and queue measurements are pushed by the
//! [`ControllerObserver`] and [`QueueObserver`] implemented here; queue
//! depths, the ages of in-flight work and the informers' counters are pulled
//! at scrape time by
//! [`Pulled`], so no timer task is needed.

mod controller;
mod pulled;
mod queue;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::controller::{ControllerMetrics, Latency, LatencyLabels};
use self::pulled::Pulled;
use self::queue::QueueMetrics;
use super::erased::SharedInformer;
use super::runnable::Placed;
use crate::controller::{Controller, ControllerBuilder, Reconciler, Watch};
use crate::object::Object;
use crate::placement::ShardingObserver;

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The `result` label values, initialised to zero for every controller.
pub(super) const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ControllerLabels {
    pub(super) controller: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) controller: String,
    pub(super) result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct QueueLabels {
    pub(super) name: String,
    pub(super) controller: String,
}

/// A queue's labels and one of its key groups.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct QueueGroupLabels {
    pub(super) name: String,
    pub(super) controller: String,
    pub(super) group: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct NameLabels {
    pub(super) name: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// client-go's workqueue buckets: 10 ns to 1000 s, ×10.
/// 10 µs to about 84 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 24))
}

fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Every metric family the manager exports.
#[derive(Debug, Clone)]
pub(super) struct Metrics {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    panics: Family<ControllerLabels, Counter>,
    timeouts: Family<ControllerLabels, Counter>,
    ryw_timeouts: Family<ControllerLabels, Counter>,
    fenced_refused: Family<ControllerLabels, Counter>,
    hot_keys: Family<ControllerLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerLabels>,
    latency: HistogramFamily<LatencyLabels>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    retries: Family<QueueLabels, Counter>,
    limiter_panics: Family<QueueLabels, Counter>,
    leader: Family<NameLabels, Gauge>,
    shards_owned: Family<NameLabels, Gauge>,
    handovers: Family<NameLabels, Counter>,
    acquisition_time: HistogramFamily<NameLabels>,
    pulled: Arc<Pulled>,
}

impl Metrics {
    /// Creates the families and registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            timeouts: Family::default(),
            ryw_timeouts: Family::default(),
            fenced_refused: Family::default(),
            hot_keys: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            latency: Family::new_with_constructor(latency_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
            retries: Family::default(),
            limiter_panics: Family::default(),
            leader: Family::default(),
            shards_owned: Family::default(),
            handovers: Family::default(),
            acquisition_time: Family::new_with_constructor(reconcile_histogram),
            pulled: Arc::new(Pulled::default()),
        };
        metrics.register_controller_families(registry);
        metrics.register_controller_time_families(registry);
        metrics.register_queue_families(registry);
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            metrics.leader.clone(),
        );
        registry.register(
            "tend_shards_owned",
            "Shards this replica owns, by membership group",
            metrics.shards_owned.clone(),
        );
        registry.register(
            "tend_shard_handovers",
            "Shards this replica gave up to another member (drained, then released), by membership group",
            metrics.handovers.clone(),
        );
        registry.register(
            "tend_shard_acquisition_duration_seconds",
            "Seconds from a shard's assignment to this replica until it owned it (its old owner's drain, or the wait for its lease to expire once its member was gone, and the acquisition), by membership group",
            metrics.acquisition_time.clone(),
        );
        registry.register_collector(Box::new(Arc::clone(&metrics.pulled)));
        metrics
    }

    fn register_controller_families(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            self.terminal_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            self.panics.clone(),
        );
        r.register(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliation timeouts per controller",
            self.timeouts.clone(),
        );
        r.register(
            "tend_controller_read_your_writes_timeouts",
            "Total number of keys reconciled before the caches showed their last writes (the wait's bound passed)",
            self.ryw_timeouts.clone(),
        );
        r.register(
            "tend_controller_fenced_writes_refused",
            "Total number of writes through reconciles' clients refused because their fencing token (the leader's or the shard's) was no longer current",
            self.fenced_refused.clone(),
        );
        self.register_tend_controller_families(r);
    }

    /// The controller families controller-runtime has no equivalent of.
    fn register_tend_controller_families(&self, r: &mut Registry) {
        r.register(
            "tend_controller_hot_key_episodes",
            "Total number of times a key became hot: reconciled again and again with a write each time (two controllers undoing each other, or a reconciler writing a new value on every run)",
            self.hot_keys.clone(),
        );
        r.register(
            "tend_controller_reconcile_latency_seconds",
            "Time from what woke a reconcile (a change reaching the controller, the first of those coalesced; a retry or requeue when due) to its start, per trigger",
            self.latency.clone(),
        );
    }

    fn register_controller_time_families(&self, r: &mut Registry) {
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            self.max_concurrent.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active_workers.clone(),
        );
    }

    fn register_queue_families(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        r.register(
            "tend_workqueue_rate_limiter_panics",
            "Total number of panics of a workqueue's rate limiter (each retried after a fixed delay)",
            self.limiter_panics.clone(),
        );
    }

    /// A controller builder whose observers feed these metrics.
    pub(super) fn controller_builder<O: Object, R: Reconciler<O>>(
        &self,
        name: &str,
        primary: impl Into<Watch<O>>,
        reconciler: R,
    ) -> ControllerBuilder<O, R> {
        Controller::builder(name, primary, reconciler)
            .observer(self.controller_observer(name))
            .queue_observer(self.queue_observer(name))
    }

    /// The observer for controller `name`'s reconciles; initialises its
    /// counters to zero so that they are exported before the first reconcile.
    pub(super) fn controller_observer(&self, name: &str) -> Arc<ControllerMetrics> {
        let labels = ControllerLabels {
            controller: name.to_owned(),
        };
        let results = RESULTS.map(|result| {
            self.reconcile_total.get_or_create_owned(&ResultLabels {
                controller: name.to_owned(),
                result: result.to_owned(),
            })
        });
        Arc::new(ControllerMetrics {
            results,
            errors: self.reconcile_errors.get_or_create_owned(&labels),
            terminal: self.terminal_errors.get_or_create_owned(&labels),
            panics: self.panics.get_or_create_owned(&labels),
            timeouts: self.timeouts.get_or_create_owned(&labels),
            ryw_timeouts: self.ryw_timeouts.get_or_create_owned(&labels),
            fenced_refused: self.fenced_refused.get_or_create_owned(&labels),
            hot_keys: self.hot_keys.get_or_create_owned(&labels),
            time: self.reconcile_time.get_or_create_owned(&labels),
            active: self.active_workers.get_or_create_owned(&labels),
            latency: Latency {
                family: self.latency.clone(),
                controller: name.to_owned(),
                series: Default::default(),
            },
        })
    }

    fn remove_latency(&self, name: &str) {
        let triggers = crate::controller::Trigger::names();
        for trigger in triggers.into_iter().chain(["none"]) {
            self.latency.remove(&LatencyLabels {
                controller: name.to_owned(),
                trigger,
            });
        }
    }

    /// The observer for controller `name`'s queue.
    pub(super) fn queue_observer(&self, name: &str) -> Arc<QueueMetrics> {
        let labels = queue_labels(name);
        Arc::new(QueueMetrics {
            adds: self.adds.get_or_create_owned(&labels),
            queue_duration: self.queue_duration.get_or_create_owned(&labels),
            work_duration: self.work_duration.get_or_create_owned(&labels),
            retries: self.retries.get_or_create_owned(&labels),
            limiter_panics: self.limiter_panics.get_or_create_owned(&labels),
        })
    }

    /// Records a registered controller: its worker count and its queue,
    /// whose in-flight ages are pulled at scrape time.
    pub(super) fn add_controller(&self, placed: &Placed) {
        let name = &placed.view.name;
        let labels = ControllerLabels {
            controller: name.clone(),
        };
        let workers = i64::try_from(placed.concurrency).unwrap_or(i64::MAX);
        self.max_concurrent.get_or_create(&labels).set(workers);
        let queue = Arc::clone(&placed.view.queue);
        self.pulled.queues.lock().push((queue_labels(name), queue));
        let footprint = Arc::clone(&placed.view.footprint);
        self.pulled.footprints.lock().push((labels, footprint));
    }

    /// Forgets a removed controller: every series labelled with its name.
    pub(super) fn remove_controller(&self, name: &str) {
        let labels = ControllerLabels {
            controller: name.to_owned(),
        };
        for result in RESULTS {
            self.reconcile_total.remove(&ResultLabels {
                controller: name.to_owned(),
                result: result.to_owned(),
            });
        }
        for family in [
            &self.reconcile_errors,
            &self.terminal_errors,
            &self.panics,
            &self.timeouts,
            &self.ryw_timeouts,
            &self.fenced_refused,
            &self.hot_keys,
        ] {
            family.remove(&labels);
        }
        self.reconcile_time.remove(&labels);
        self.remove_latency(name);
        self.max_concurrent.remove(&labels);
        self.active_workers.remove(&labels);
        let queue = queue_labels(name);
        for family in [&self.adds, &self.retries, &self.limiter_panics] {
            family.remove(&queue);
        }
        self.queue_duration.remove(&queue);
        self.work_duration.remove(&queue);
        self.pulled
            .queues
            .lock()
            .retain(|(labels, _)| *labels != queue);
        self.pulled
            .footprints
            .lock()
            .retain(|(controller, _)| controller.controller != name);
    }

    /// Records a registered informer, whose counters are pulled at scrape
    /// time.
    pub(super) fn add_informer(&self, name: &str, informer: Arc<dyn SharedInformer>) {
        let labels = NameLabels {
            name: name.to_owned(),
        };
        self.pulled.informers.lock().push((labels, informer));
    }

    /// Forgets a stopped informer.
    pub(super) fn remove_informer(&self, name: &str) {
        self.pulled
            .informers
            .lock()
            .retain(|(labels, _)| labels.name != name);
    }

    /// Sets `leader_election_master_status{name}`.
    pub(super) fn set_leader(&self, election: &str, leader: bool) {
        let labels = NameLabels {
            name: election.to_owned(),
        };
        self.leader.get_or_create(&labels).set(i64::from(leader));
    }
}

impl Metrics {
    /// How many shards this replica owns in `group`.
    pub(super) fn set_shards_owned(&self, group: &str, owned: usize) {
        let labels = NameLabels {
            name: group.to_owned(),
        };
        let owned = i64::try_from(owned).unwrap_or(i64::MAX);
        self.shards_owned.get_or_create(&labels).set(owned);
    }

    /// This replica acquired a shard of `group`, `waited` after it was
    /// assigned here.
    pub(super) fn shard_acquired(&self, group: &str, waited: Duration) {
        let labels = NameLabels {
            name: group.to_owned(),
        };
        let histogram = self.acquisition_time.get_or_create(&labels);
        histogram.observe(waited.as_secs_f64());
    }

    /// This replica handed a shard of `group` over.
    pub(super) fn shard_handed_over(&self, group: &str) {
        let labels = NameLabels {
            name: group.to_owned(),
        };
        self.handovers.get_or_create(&labels).inc();
    }
}

impl ShardingObserver for Metrics {
    fn owned(&self, group: &str, owned: usize) {
        self.set_shards_owned(group, owned);
    }

    fn acquired(&self, group: &str, waited: Duration) {
        self.shard_acquired(group, waited);
    }

    fn handed_over(&self, group: &str) {
        self.shard_handed_over(group);
    }
}

fn queue_labels(name: &str) -> QueueLabels {
    QueueLabels {
        name: name.to_owned(),
        controller: name.to_owned(),
    }
}
