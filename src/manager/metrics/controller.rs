//! `ControllerMetrics`: one controller's reconcile measurements, pushed
//! through its `ControllerObserver`.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::{HistogramFamily, RESULTS};
use crate::controller::{ControllerObserver, Outcome, Trigger, Triggers};

/// `tend_controller_reconcile_latency_seconds`' labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LatencyLabels {
    pub(super) controller: String,
    /// A trigger's name, or `none`.
    pub(super) trigger: &'static str,
}

/// One controller's latency series, one per trigger and one for none,
/// each made on its first observation (no series for triggers never seen).
#[derive(Debug)]
pub(in crate::manager) struct Latency {
    pub(super) family: HistogramFamily<LatencyLabels>,
    pub(super) controller: String,
    pub(super) series: [OnceLock<Histogram>; Trigger::COUNT + 1],
}

impl Latency {
    fn observe(&self, index: usize, trigger: &'static str, seconds: f64) {
        let Some(cell) = self.series.get(index) else {
            return;
        };
        cell.get_or_init(|| {
            self.family.get_or_create_owned(&LatencyLabels {
                controller: self.controller.clone(),
                trigger,
            })
        })
        .observe(seconds);
    }
}

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
    pub(super) hot_keys: Counter,
    pub(super) time: Histogram,
    pub(super) active: Gauge,
    pub(super) latency: Latency,
}

impl ControllerObserver for ControllerMetrics {
    fn reconcile_latency(&self, triggers: Triggers, latency: Duration) {
        let seconds = latency.as_secs_f64();
        if triggers.is_empty() {
            self.latency.observe(Trigger::COUNT, "none", seconds);
        }
        for trigger in triggers.iter() {
            self.latency
                .observe(trigger.index(), trigger.name(), seconds);
        }
    }

    fn reconcile_started(&self) {
        self.active.inc();
    }

    fn read_your_writes_expired(&self) {
        self.ryw_timeouts.inc();
    }

    fn fenced_write_refused(&self) {
        self.fenced_refused.inc();
    }

    fn hot_key(&self) {
        self.hot_keys.inc();
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

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::manager::metrics::Metrics;

    fn exposition(registry: &Registry) -> Vec<String> {
        let mut text = String::new();
        encode(&mut text, registry).expect("encodes");
        text.lines()
            .filter(|line| line.starts_with("tend_controller_reconcile_latency_seconds"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn latency_goes_to_one_series_per_trigger_in_exact_buckets() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let observer = metrics.controller_observer("sites");
        let mut both = Triggers::from(Trigger::Changed);
        crate::Payload::merge(&mut both, Trigger::Owned.into());
        observer.reconcile_latency(both, Duration::from_millis(1500));
        observer.reconcile_latency(Triggers::default(), Duration::from_micros(3));
        let lines = exposition(&registry);
        let line = |trigger: &str, le: &str| {
            format!(
                "tend_controller_reconcile_latency_seconds_bucket{{le=\"{le}\",controller=\"sites\",trigger=\"{trigger}\"}} "
            )
        };
        let count = |prefix: String| {
            lines
                .iter()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` in {lines:#?}"))
                .rsplit(' ')
                .next()
                .map(str::to_owned)
        };
        // 1.5 s: above the 1.31072 s bucket, within 2.62144 s.
        for trigger in ["changed", "owned"] {
            assert_eq!(count(line(trigger, "1.31072")).as_deref(), Some("0"));
            assert_eq!(count(line(trigger, "2.62144")).as_deref(), Some("1"));
        }
        assert_eq!(count(line("none", "0.00001")).as_deref(), Some("1"));
        assert!(
            !lines.iter().any(|l| l.contains("trigger=\"resync\"")),
            "no series for a trigger never seen"
        );
        metrics.remove_controller("sites");
        assert!(
            exposition(&registry).iter().all(|l| l.starts_with('#')),
            "forgotten"
        );
    }
}
