//! Predicates: which events of a source enqueue a reconcile.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::informer::Event;
use crate::object::{LabelSelector, Object};

/// Decides whether an event enqueues its keys. Combine with
/// [`and`](Predicate::and), [`or`](Predicate::or) and `!`.
///
/// The built-in predicates but [`label_selector`](Predicate::label_selector)
/// only filter updates (an [`Event::Applied`] with an old state):
/// creations, deletions, initial lists and resyncs always pass, as in
/// controller-runtime. Combine them with [`or`](Predicate::or): "the spec
/// changed, or a delete started".
///
/// # Examples
///
/// ```
/// use tend::Event;
/// use tend::controller::Predicate;
/// # #[derive(Clone)] struct Widget { replicas: u32 }
/// # impl tend::Object for Widget {
/// #     type Key = String;
/// #     fn key(&self) -> String { String::new() }
/// #     fn version(&self) -> tend::Revision { tend::Revision::ZERO }
/// #     fn set_version(&mut self, _: tend::Revision) {}
/// # }
///
/// let spec_or_big: Predicate<Widget> = Predicate::generation_changed()
///     .or(Predicate::new(|event: &Event<Widget>| event.object().replicas > 10));
/// ```
pub struct Predicate<O>(Arc<PredicateFn<O>>);

type PredicateFn<O> = dyn Fn(&Event<O>) -> bool + Send + Sync;

impl<O: Object> Predicate<O> {
    /// A custom predicate over events.
    pub fn new(f: impl Fn(&Event<O>) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Passes updates whose version changed (drops exact re-deliveries).
    #[must_use]
    pub fn version_changed() -> Self {
        Self::on_update(|old, new| old.version() != new.version())
    }

    /// Passes updates whose generation changed (drops status-only updates).
    /// Objects without a generation always pass.
    #[must_use]
    pub fn generation_changed() -> Self {
        Self::on_update(|old, new| match (old.generation(), new.generation()) {
            (Some(old), Some(new)) => old != new,
            _ => true,
        })
    }

    /// Passes updates whose labels changed ([`Object::labels`]; none and
    /// an empty map are the same).
    #[must_use]
    pub fn labels_changed() -> Self {
        Self::on_update(|old, new| differ(old.labels(), new.labels()))
    }

    /// Passes updates whose annotations changed ([`Object::annotations`];
    /// none and an empty map are the same).
    #[must_use]
    pub fn annotations_changed() -> Self {
        Self::on_update(|old, new| differ(old.annotations(), new.annotations()))
    }

    /// Passes updates whose finalizers changed, their order included
    /// ([`Object::finalizer_names`]).
    #[must_use]
    pub fn finalizers_changed() -> Self {
        Self::on_update(|old, new| {
            old.finalizer_names().unwrap_or_default() != new.finalizer_names().unwrap_or_default()
        })
    }

    /// Passes updates that mark the object deleted: the first state with
    /// [`Object::deletion`] set, the one a finalizer's cleanup starts from.
    #[must_use]
    pub fn deletion_started() -> Self {
        Self::on_update(|old, new| old.deletion().is_none() && new.deletion().is_some())
    }

    /// Passes events about objects whose labels `selector` selects; an
    /// update passes when the old or the new state is selected, so an
    /// object whose labels take it out of the selection is seen leaving.
    /// Unlike the other built-ins, it filters every kind of event.
    ///
    /// # Examples
    ///
    /// ```
    /// use tend::controller::Predicate;
    /// # #[derive(Clone, Debug)] struct Pod { name: String, version: tend::Revision }
    /// # tend::impl_object!(Pod, key: name: String, version: version);
    ///
    /// let web: Predicate<Pod> = Predicate::label_selector("app=web,tier notin (cache)".parse()?);
    /// # Ok::<(), tend::SelectorError>(())
    /// ```
    #[must_use]
    pub fn label_selector(selector: LabelSelector) -> Self {
        Self::new(move |event| match event {
            Event::Applied {
                old: Some(old),
                new,
            } => selector.matches(old.labels()) || selector.matches(new.labels()),
            event => selector.matches(event.object().labels()),
        })
    }

    fn on_update(changed: impl Fn(&O, &O) -> bool + Send + Sync + 'static) -> Self {
        Self::new(move |event| match event {
            Event::Applied {
                old: Some(old),
                new,
            } => changed(old, new),
            _ => true,
        })
    }

    /// Passes events that both pass.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self::new(move |event| self.matches(event) && other.matches(event))
    }

    /// Passes events that either passes.
    #[must_use]
    pub fn or(self, other: Self) -> Self {
        Self::new(move |event| self.matches(event) || other.matches(event))
    }

    /// Whether `event` passes.
    #[must_use]
    pub fn matches(&self, event: &Event<O>) -> bool {
        (self.0)(event)
    }
}

/// Whether two label or annotation maps differ, none being empty.
fn differ(old: Option<&BTreeMap<String, String>>, new: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    old.unwrap_or(&empty) != new.unwrap_or(&empty)
}

/// `!predicate` passes the events `predicate` drops.
impl<O: Object> std::ops::Not for Predicate<O> {
    type Output = Self;

    fn not(self) -> Self {
        Self::new(move |event| !self.matches(event))
    }
}

impl<O> Clone for Predicate<O> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<O> fmt::Debug for Predicate<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Predicate")
    }
}
