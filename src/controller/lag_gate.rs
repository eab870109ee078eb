//! [`LagGate`]: no reconcile starts while one of the controller's caches
//! lags its source past a bound (`ControllerBuilder::hold_while_lagging`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::builder::Inputs;
use crate::informer::CacheLag;
use crate::object::Object;

/// How often a held worker looks at the caches again.
const RECHECK: Duration = Duration::from_millis(100);

/// Reads one cache's lag.
pub(super) type LagOf = Arc<dyn Fn() -> Option<CacheLag> + Send + Sync>;

/// The caches a controller waits for, and the bound on their lag.
pub(super) struct LagGate {
    pub(super) name: String,
    pub(super) bound: Duration,
    pub(super) caches: Vec<LagOf>,
    /// Whether a worker is held now: logged once per episode.
    holding: AtomicBool,
}

impl LagGate {
    /// The gate of `hold_while_lagging`, over the primary's cache and every
    /// secondary's the controller waits for.
    pub(super) fn of<O: Object>(
        name: &str,
        inputs: &Inputs<O>,
        bound: Option<Duration>,
    ) -> Option<Self> {
        let bound = bound?;
        let primary = inputs.primary.informer().clone();
        let mut caches: Vec<LagOf> = vec![Arc::new(move || primary.lag())];
        for secondary in inputs.secondaries.iter().filter(|s| !s.optional()) {
            let secondary = Arc::clone(secondary);
            caches.push(Arc::new(move || secondary.lag()));
        }
        Some(Self::new(name.to_owned(), bound, caches))
    }

    pub(super) fn new(name: String, bound: Duration, caches: Vec<LagOf>) -> Self {
        Self {
            name,
            bound,
            caches,
            holding: AtomicBool::new(false),
        }
    }

    /// The worst lag past the bound, if any.
    pub(super) fn lagging(&self) -> Option<CacheLag> {
        self.caches
            .iter()
            .filter_map(|lag| lag())
            .filter(|lag| lag.behind_for > self.bound)
            .max_by_key(|lag| lag.behind_for)
    }

    /// Returns at once while every cache is within the bound; otherwise
    /// waits until they are, `None` when `stop` or `stopping` comes first.
    pub(super) async fn until_current(
        &self,
        stop: &CancellationToken,
        stopping: &CancellationToken,
    ) -> Option<()> {
        while let Some(lag) = self.lagging() {
            if !self.holding.swap(true, Ordering::AcqRel) {
                tracing::warn!(controller = %self.name, behind_for = ?lag.behind_for, revisions = lag.revisions, bound = ?self.bound, "a cache lags its source, holding reconciles");
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return None,
                () = stopping.cancelled() => return None,
                () = tokio::time::sleep(RECHECK) => {}
            }
        }
        if self.holding.swap(false, Ordering::AcqRel) {
            tracing::info!(controller = %self.name, "the caches caught up, reconciling again");
        }
        Some(())
    }
}
