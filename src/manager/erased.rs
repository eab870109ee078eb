//! What the manager needs from informers, controllers and queues of any
//! object type, with the type erased.

use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::controller::{
    Footprint, HotKey, HotKeys, Journal, JournalTotals, Reconciled, TableSizes,
};
use crate::informer::{Informer, InformerError, InformerId, InformerStats};
use crate::object::{Object, ObjectKey};
use crate::placement::Placement;
use crate::queue::{Payload, QueueKey, QueueStats, WorkQueue};

/// A registered informer.
pub(super) trait SharedInformer: Send + Sync {
    fn id(&self) -> InformerId;
    fn is_synced(&self) -> bool;
    fn stats(&self) -> InformerStats;
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, Result<(), InformerError>>;
    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'static, Result<(), InformerError>>;
    fn as_any(&self) -> &dyn Any;
}

impl<O: Object> SharedInformer for Informer<O> {
    fn id(&self) -> InformerId {
        Informer::id(self)
    }

    fn is_synced(&self) -> bool {
        Informer::is_synced(self)
    }

    fn stats(&self) -> InformerStats {
        Informer::stats(self)
    }

    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, Result<(), InformerError>> {
        let informer = self.clone();
        Box::pin(async move { informer.run(cancel).await })
    }

    fn wait_synced(&self, timeout: Duration) -> BoxFuture<'static, Result<(), InformerError>> {
        let informer = self.clone();
        Box::pin(async move { informer.wait_synced(timeout).await })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// In-flight keys held longer than some bound, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Held {
    /// How many keys are held that long.
    pub(super) count: usize,
    /// The oldest of them (at most the limit asked for), rendered by
    /// [`render_key`], with their ages.
    pub(super) oldest: Vec<(String, Duration)>,
}

/// A controller's queue, as `/debug/queues`, `/healthz` and the metrics see
/// it.
pub(super) trait QueueView: Send + Sync {
    fn stats(&self) -> QueueStats;
    /// The in-flight keys held longer than `over` (all of them for `None`).
    fn held_longer_than(&self, over: Option<Duration>, limit: usize) -> Held;
    /// The ready keys of the groups named for metrics, by label.
    fn metered_groups(&self) -> Vec<(String, usize)>;
}

impl<K: QueueKey, T: Payload> QueueView for WorkQueue<K, T> {
    fn stats(&self) -> QueueStats {
        WorkQueue::stats(self)
    }

    fn metered_groups(&self) -> Vec<(String, usize)> {
        WorkQueue::metered_groups(self)
    }

    fn held_longer_than(&self, over: Option<Duration>, limit: usize) -> Held {
        // `in_flight` lists the oldest first.
        let keys = self.in_flight();
        let count = over.map_or(keys.len(), |over| {
            keys.iter().take_while(|k| k.age > over).count()
        });
        let oldest = keys
            .into_iter()
            .take(count.min(limit))
            .map(|k| (render_key(&k.key).into_owned(), k.age))
            .collect();
        Held { count, oldest }
    }
}

/// A controller's journal, its keys rendered by [`render_key`].
pub(super) trait JournalView: Send + Sync {
    /// The last reconciles, oldest first.
    fn reconciles(&self) -> Vec<Reconciled<String>>;
    /// The last failed reconciles, oldest first.
    fn failures(&self) -> Vec<Reconciled<String>>;
    fn totals(&self) -> JournalTotals;
}

impl<K: QueueKey> JournalView for Journal<K> {
    fn reconciles(&self) -> Vec<Reconciled<String>> {
        Journal::reconciles(self)
            .into_iter()
            .map(rendered)
            .collect()
    }

    fn failures(&self) -> Vec<Reconciled<String>> {
        Journal::failures(self).into_iter().map(rendered).collect()
    }

    fn totals(&self) -> JournalTotals {
        Journal::totals(self)
    }
}

/// The sizes of a controller's per-key tables.
pub(super) trait FootprintView: Send + Sync {
    fn sizes(&self) -> TableSizes;
}

impl<K: QueueKey> FootprintView for Footprint<K> {
    fn sizes(&self) -> TableSizes {
        Footprint::sizes(self)
    }
}

/// Sizes fixed, for tests of what shows them.
#[cfg(test)]
impl FootprintView for TableSizes {
    fn sizes(&self) -> TableSizes {
        *self
    }
}

/// A controller's hot keys, rendered by [`render_key`].
pub(super) trait HotKeysView: Send + Sync {
    fn hot(&self) -> Vec<HotKey<String>>;
}

impl<K: QueueKey> HotKeysView for HotKeys<K> {
    fn hot(&self) -> Vec<HotKey<String>> {
        HotKeys::hot(self)
            .into_iter()
            .map(|hot| HotKey {
                key: render_key(&hot.key).into_owned(),
                writes: hot.writes,
                woken_by: hot.woken_by,
                since: hot.since,
                spacing: hot.spacing,
            })
            .collect()
    }
}

fn rendered<K: QueueKey>(entry: Reconciled<K>) -> Reconciled<String> {
    Reconciled {
        key: render_key(&entry.key).into_owned(),
        triggers: entry.triggers,
        attempt: entry.attempt,
        waited: entry.waited,
        started: entry.started,
        took: entry.took,
        outcome: entry.outcome,
        failure: entry.failure,
    }
}

/// A key as its user wrote it: string keys as they are (their `Debug` form
/// would quote and escape them), an [`ObjectKey`] as `namespace/name`, any
/// other key in its `Debug` form.
///
/// Keys need only `Debug` ([`QueueKey`]); these types are recognised by
/// their type, not by guessing at the `Debug` output.
pub(super) fn render_key<K: QueueKey>(key: &K) -> Cow<'_, str> {
    let any: &dyn Any = key;
    if let Some(key) = any.downcast_ref::<ObjectKey>() {
        Cow::Owned(key.to_string())
    } else if let Some(text) = any.downcast_ref::<String>() {
        Cow::Borrowed(text)
    } else if let Some(text) = any.downcast_ref::<&'static str>() {
        Cow::Borrowed(text)
    } else if let Some(text) = any.downcast_ref::<Arc<str>>() {
        Cow::Borrowed(text)
    } else if let Some(text) = any.downcast_ref::<Box<str>>() {
        Cow::Borrowed(text)
    } else if let Some(text) = any.downcast_ref::<Cow<'static, str>>() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{key:?}"))
    }
}

/// A registered controller, as the status and the metrics see it once the
/// controller itself has been handed to its task.
#[derive(Clone)]
pub(super) struct ControllerView {
    pub(super) name: String,
    pub(super) placement: Placement,
    pub(super) queue: Arc<dyn QueueView>,
    pub(super) journal: Arc<dyn JournalView>,
    pub(super) hot_keys: Arc<dyn HotKeysView>,
    pub(super) footprint: Arc<dyn FootprintView>,
    pub(super) reconcile_timeout: Option<Duration>,
    /// The informers it reads.
    pub(super) informers: Vec<InformerId>,
    /// Those it waits for before reconciling (not
    /// [optional](crate::controller::Watch::optional)).
    pub(super) required: Vec<InformerId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_keys_render_as_written_and_others_in_their_debug_form() {
        let quoted = "say \"hi\"\n\\ ünï".to_owned();
        assert_eq!(render_key(&quoted), quoted.as_str());
        assert_eq!(render_key(&"plain"), "plain");
        assert_eq!(render_key(&Arc::<str>::from("arc")), "arc");
        assert_eq!(render_key(&Box::<str>::from("box")), "box");
        assert_eq!(render_key(&Cow::<'static, str>::Borrowed("cow")), "cow");
        assert_eq!(render_key(&ObjectKey::new("ns", "web")), "ns/web");
        assert_eq!(render_key(&42_u32), "42");
        assert_eq!(render_key(&("ns", 7_u8)), "(\"ns\", 7)");
    }
}
