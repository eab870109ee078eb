//! Which runnables are active on this replica now: each controller's and
//! task's placement and whether it may act here, for `/debug/runnables` and
//! `tend_runnable_active{name,kind,placement}`.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

use crate::placement::{Leadership, Placement, Sharding};

/// Whether a runnable may act here now.
pub(super) type IsActive = Arc<dyn Fn() -> bool + Send + Sync>;

/// When a runnable at `placement` may act here: always, while leading, or
/// while owning a shard.
pub(super) fn active_for(
    placement: Placement,
    leadership: Option<&Leadership>,
    sharding: Option<&Sharding>,
) -> IsActive {
    match placement {
        Placement::Leader => match leadership.cloned() {
            Some(leadership) => Arc::new(move || leadership.is_leader()),
            None => Arc::new(|| false),
        },
        Placement::Sharded => match sharding.cloned() {
            Some(sharding) => Arc::new(move || sharding.owns_any()),
            None => Arc::new(|| false),
        },
        Placement::Everywhere => Arc::new(|| true),
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunnableLabels {
    name: String,
    kind: String,
    placement: String,
}

/// The runnables registered with a manager; the list's lock is held for a
/// copy, never across an `.await`.
#[derive(Default)]
pub(super) struct Activity {
    runnables: Mutex<Vec<(RunnableLabels, IsActive)>>,
}

/// One runnable, as `/debug/runnables` shows it.
#[derive(Debug, Serialize)]
pub(super) struct RunnableReport {
    name: String,
    kind: String,
    placement: String,
    active: bool,
}

impl Activity {
    /// Records runnable `name` of `kind` ("controller" or "task") at
    /// `placement`, active while `active` says so.
    pub(super) fn add(&self, name: &str, kind: &str, placement: Placement, active: IsActive) {
        let labels = RunnableLabels {
            name: name.to_owned(),
            kind: kind.to_owned(),
            placement: placement.as_str().to_owned(),
        };
        self.runnables.lock().push((labels, active));
    }

    /// Forgets runnable `name` of `kind`.
    pub(super) fn remove(&self, name: &str, kind: &str) {
        self.runnables
            .lock()
            .retain(|(labels, _)| labels.name != name || labels.kind != kind);
    }

    /// `/debug/runnables`.
    pub(super) fn report(&self) -> Vec<RunnableReport> {
        self.snapshot()
            .into_iter()
            .map(|(labels, active)| RunnableReport {
                name: labels.name,
                kind: labels.kind,
                placement: labels.placement,
                active,
            })
            .collect()
    }

    fn snapshot(&self) -> Vec<(RunnableLabels, bool)> {
        let runnables = self.runnables.lock().clone();
        runnables
            .into_iter()
            .map(|(labels, active)| (labels, active()))
            .collect()
    }
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("runnables", &self.runnables.lock().len())
            .finish()
    }
}

impl Collector for Activity {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "tend_runnable_active",
            "Whether a controller or task may act on this replica now (1) or not (0: a standby, or no shard owned), by placement",
            None,
            MetricType::Gauge,
        )?;
        for (labels, active) in self.snapshot() {
            ConstGauge::new(i64::from(active)).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
