//! A controller's key groups: its work queue served fairly across them, and
//! the groups whose queue depth the manager exports.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::hash::Hash;

use super::{ControllerBuilder, ControllerSetting, Reconciler};
use crate::error::SettingError;
use crate::object::Object;
use crate::queue::{GroupFn, WorkQueueBuilder, group_fn, group_hash};

/// The most groups [`ControllerBuilder::group_metrics`] takes: each is one
/// series of `tend_workqueue_group_depth`.
pub const MAX_GROUP_METRICS: usize = 100;

/// What the builder was told of key groups.
pub(crate) struct KeyGroups<K> {
    group: Option<GroupFn<K>>,
    /// By label: one series each, whatever the order or repeats given.
    metered: BTreeMap<String, u64>,
}

impl<K> Default for KeyGroups<K> {
    fn default() -> Self {
        Self {
            group: None,
            metered: BTreeMap::new(),
        }
    }
}

impl<K: crate::queue::QueueKey> KeyGroups<K> {
    /// What is wrong with the settings, if anything.
    pub(crate) fn invalid(&self) -> Option<(ControllerSetting, SettingError)> {
        let max = MAX_GROUP_METRICS as u64;
        if self.metered.len() > MAX_GROUP_METRICS {
            Some((
                ControllerSetting::GroupMetrics,
                SettingError::AboveMax { max },
            ))
        } else if !self.metered.is_empty() && self.group.is_none() {
            let needs = "group_by";
            Some((
                ControllerSetting::GroupMetrics,
                SettingError::Needs { setting: needs },
            ))
        } else {
            None
        }
    }

    /// Gives the queue the group function and the metered groups.
    pub(crate) fn apply<T: crate::queue::Payload>(
        self,
        mut queue: WorkQueueBuilder<K, T>,
    ) -> WorkQueueBuilder<K, T> {
        if let Some(group) = self.group {
            queue = queue.grouped(group);
        }
        queue.metered_groups(self.metered.into_iter().collect())
    }

    pub(crate) fn is_grouped(&self) -> bool {
        self.group.is_some()
    }
}

impl<O: Object, R: Reconciler<O>> ControllerBuilder<O, R> {
    /// Serves the controller's keys fairly across the groups `group` puts
    /// them in (a tenant, a namespace): a group with 100,000 keys to
    /// reconcile takes one turn in G, G the groups with keys waiting, so a
    /// quiet tenant's change waits for G reconciles to start, not for the
    /// noisy tenant's backlog. The bound, and how groups combine with the
    /// background priority of resyncs and initial lists, are those of
    /// [`WorkQueueBuilder::group_by`]. Default: none (one FIFO per
    /// priority, nothing extra paid).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::convert::Infallible;
    /// # use tend::controller::{Action, Context, Controller, Reconciler};
    /// # use tend::memory::MemoryStore;
    /// # use tend::{Informer, Revision};
    /// # #[derive(Clone, Debug)]
    /// # struct App { name: String, version: Revision }
    /// # tend::impl_object!(App, key: name: String, version: version);
    /// # struct Apps;
    /// # impl Reconciler<App> for Apps {
    /// #     type Error = Infallible;
    /// #     async fn reconcile(&self, _: Context<App>) -> Result<Action, Infallible> { Ok(Action::Done) }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let apps = Informer::builder(MemoryStore::<App>::new("apps")).build()?;
    /// // Keys are "tenant/app": tenants take turns.
    /// let tenant = |key: &String| key.split_once('/').map_or(key.clone(), |(t, _)| t.to_owned());
    /// let controller = Controller::builder("apps", &apps, Apps)
    ///     .group_by(tenant)
    ///     .group_metrics(["acme", "globex"]) // tend_workqueue_group_depth{group="acme"}
    ///     .build()?;
    /// # let _ = controller;
    /// # Ok(()) }
    /// ```
    pub fn group_by<G: Hash>(
        mut self,
        group: impl Fn(&O::Key) -> G + Send + Sync + 'static,
    ) -> Self {
        self.groups.group = Some(group_fn(group));
        self
    }

    /// Exports the queue depth of these groups (as
    /// [`group_by`](Self::group_by)'s function names them: values of its
    /// type, or a `&str` for a `String`, which hashes alike) as the gauge
    /// `tend_workqueue_group_depth{name, controller, group}`, read at
    /// scrape time. Opt-in and bounded, since one series per group of an
    /// open set is the label explosion Prometheus warns of: only the groups
    /// listed here, at most [`MAX_GROUP_METRICS`]; the rest are in
    /// `workqueue_depth`. Calls add up; a group named twice is one series.
    ///
    /// [`build`](Self::build) refuses more than [`MAX_GROUP_METRICS`]
    /// groups, or groups without `group_by`.
    pub fn group_metrics<G: Hash + Display>(mut self, groups: impl IntoIterator<Item = G>) -> Self {
        let hashed = groups
            .into_iter()
            .map(|group| (group.to_string(), group_hash(&group)));
        self.groups.metered.extend(hashed);
        self
    }
}
