//! `ControllerMetrics`: one controller's reconcile measurements, pushed
//! through its `ControllerObserver`.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::RESULTS;
use crate::controller::{ControllerObserver, Outcome};

/// One controller's reconcile metrics.
#[derive(Debug)]
pub(in crate::manager) struct ControllerMetrics {
    pub(super) results: [Counter; 4],
    pub(super) errors: Counter,
    pub(super) terminal: Counter,
    pub(super) panics: Counter,
    pub(super) timeouts: Counter,
    pub(super) ryw_timeouts: Counter,
    pub(super) fenced_refused: Counter,
    pub(super) time: Histogram,
    pub(super) active: Gauge,
}

impl ControllerObserver for ControllerMetrics {
    fn reconcile_started(&self) {
        self.active.inc();
    }

    fn read_your_writes_expired(&self) {
        self.ryw_timeouts.inc();
    }

    fn fenced_write_refused(&self) {
        self.fenced_refused.inc();
    }

    fn reconcile_finished(&self, outcome: Outcome, took: Duration) {
        self.active.dec();
        let Some(label) = outcome.result_label() else {
            return;
        };
        if let Some(i) = RESULTS.iter().position(|r| *r == label) {
            self.results[i].inc();
        }
        self.time.observe(took.as_secs_f64());
        match outcome {
            Outcome::Error => {
                self.errors.inc();
            }
            Outcome::TerminalError => {
                self.errors.inc();
                self.terminal.inc();
            }
            Outcome::Panic => {
                self.errors.inc();
                self.panics.inc();
            }
            Outcome::Timeout => {
                self.errors.inc();
                self.timeouts.inc();
            }
            _ => {}
        }
    }
}
