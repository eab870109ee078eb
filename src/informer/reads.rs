//! What a read of a [`Cache`](super::Cache) asks for, told to a hook
//! before the read (a controller's read tracking), and [`Filter`], the
//! named test [`Cache::list_where`](super::Cache::list_where) lists by.

use std::fmt;
use std::sync::Arc;

use crate::object::Object;

/// A named test of objects, to list a cache by
/// ([`Cache::list_where`](super::Cache::list_where)): the objects it
/// passes. Cheap to clone (one `Arc`).
///
/// A controller that tracks reads ([`ControllerBuilder::reads`](crate::controller::ControllerBuilder::reads))
/// records the filter itself with the reconcile's reads: an object that
/// starts or stops passing it, or changes while it passes, wakes the
/// reader. The filter is compared by identity (clones are the same
/// filter), so make it once and clone it into each reconcile: a filter made
/// anew in every reconcile is a new dependency each time, and every change
/// of the source is tested against each one. Its name is for logs. It runs
/// under the informer's and the record's locks: it must not read a cache.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tend::{Filter, Revision};
///
/// #[derive(Clone, Debug)]
/// struct Pod { name: String, ready: bool, version: Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// let ready = Filter::new("ready", |pod: &Pod| pod.ready);
/// let pod = Pod { name: "web-1".into(), ready: true, version: Revision::ZERO };
/// assert!(ready.matches(&pod));
/// assert_eq!(ready.name(), "ready");
/// ```
pub struct Filter<O> {
    inner: Arc<Named<O>>,
}

struct Named<O> {
    name: Box<str>,
    test: Box<dyn Fn(&O) -> bool + Send + Sync>,
}

impl<O> Filter<O> {
    /// The objects `test` passes, named `name` (in logs).
    pub fn new(name: impl Into<String>, test: impl Fn(&O) -> bool + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(Named {
                name: name.into().into_boxed_str(),
                test: Box::new(test),
            }),
        }
    }

    /// Whether `object` passes.
    pub fn matches(&self, object: &O) -> bool {
        (self.inner.test)(object)
    }

    /// Its name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its identity: the same for every clone, unique while one lives.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner).cast::<()>().addr()
    }
}

impl<O> Clone for Filter<O> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<O> fmt::Debug for Filter<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Filter").field(&self.name()).finish()
    }
}

/// One read of a cache, as its hook is told.
pub(crate) enum Read<'a, O: Object> {
    /// `get`: the object under this key, or its absence.
    Key(&'a O::Key),
    /// `by_index`: the objects filed under `value` of the index at `index`.
    Objects { index: usize, value: &'a str },
    /// `keys_by_index`: only which keys are filed there.
    Keys { index: usize, value: &'a str },
    /// `list`, `len`, `is_empty`: every object.
    All,
    /// `list_where`: the objects `filter` passes.
    Filter(&'a Filter<O>),
}

impl<O: Object> Clone for Read<'_, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O: Object> Copy for Read<'_, O> {}

/// Told of every read of the cache handle it is attached to, before the
/// read: a change applied after the hook returned is one the read may have
/// missed, and the hook's owner hears of it (the event comes after the
/// change is applied, so after the hook).
pub(crate) trait ReadHook<O: Object>: Send + Sync {
    fn read(&self, read: Read<'_, O>);
}
