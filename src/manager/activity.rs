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

    /// Whether runnable `name` of `kind` may act here now (`None`: no
    /// such runnable).
    pub(super) fn is_active(&self, name: &str, kind: &str) -> Option<bool> {
        let active = self
            .runnables
            .lock()
            .iter()
            .find(|(labels, _)| labels.name == name && labels.kind == kind)
            .map(|(_, active)| Arc::clone(active))?;
        Some(active())
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::memory::MemoryElectionGroup;

    fn active(activity: &Activity) -> Vec<(String, bool)> {
        activity
            .report()
            .into_iter()
            .map(|r| (format!("{} {} {}", r.kind, r.name, r.placement), r.active))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_only_runnable_is_active_exactly_while_leading() {
        let election = MemoryElectionGroup::new("lock");
        let leadership = Leadership::new(election.candidate()).campaign_again(true);
        let activity = Activity::default();
        for (name, placement) in [
            ("gc", Placement::Leader),
            ("exporter", Placement::Everywhere),
        ] {
            let is = active_for(placement, Some(&leadership), None);
            activity.add(name, "task", placement, is);
        }
        let sharded = active_for(Placement::Sharded, Some(&leadership), None);
        activity.add("items", "controller", Placement::Sharded, sharded);
        let stop = CancellationToken::new();
        let running = tokio::spawn(leadership.clone().run(stop.clone()));
        let mut term = leadership.term();
        tokio::time::timeout(Duration::from_secs(5), term.wait_for(Option::is_some))
            .await
            .expect("won")
            .expect("a term");
        let expected = |leading: bool| {
            vec![
                ("task gc leader".to_owned(), leading),
                ("task exporter everywhere".to_owned(), true),
                ("controller items sharded".to_owned(), false),
            ]
        };
        assert_eq!(active(&activity), expected(true));
        let rival = election.candidate();
        election.depose();
        let won = crate::election::LeaderElector::campaign(&rival);
        tokio::time::timeout(Duration::from_secs(5), won)
            .await
            .expect("the rival won")
            .expect("no error");
        tokio::time::timeout(Duration::from_secs(5), term.wait_for(Option::is_none))
            .await
            .expect("lost")
            .expect("a term");
        assert_eq!(active(&activity), expected(false));
        activity.remove("gc", "task");
        assert_eq!(active(&activity).len(), 2);
        stop.cancel();
        running.await.expect("not panicked").expect("clean");
    }
}
