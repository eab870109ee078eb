//! `QueueMetrics`: one controller's queue measurements, pushed through its
//! `QueueObserver`.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::queue::QueueObserver;

/// One controller's queue metrics.
#[derive(Debug)]
pub(in crate::manager) struct QueueMetrics {
    pub(super) adds: Counter,
    pub(super) queue_duration: Histogram,
    pub(super) work_duration: Histogram,
    pub(super) retries: Counter,
    pub(super) limiter_panics: Counter,
}

impl QueueObserver for QueueMetrics {
    fn added(&self) {
        self.adds.inc();
    }

    fn queued_for(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    fn worked_for(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    fn retried(&self) {
        self.retries.inc();
    }

    fn limiter_panicked(&self) {
        self.limiter_panics.inc();
    }
}
