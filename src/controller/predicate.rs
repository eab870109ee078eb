//! Predicates: which events of a source enqueue a reconcile.

use std::fmt;
use std::sync::Arc;

use crate::informer::Event;
use crate::object::Object;

/// Decides whether an event enqueues its keys. Combine with
/// [`and`](Predicate::and), [`or`](Predicate::or) and `!`.
///
/// The built-in predicates only filter updates (an [`Event::Applied`] with
/// an old state): creations, deletions, initial lists and resyncs always pass,
/// as in controller-runtime.
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
