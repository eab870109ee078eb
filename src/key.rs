//! What a key must be: one trait for the keys of objects and of the queue.

use std::fmt::Debug;
use std::hash::Hash;

/// What a key must be, for an [`Object`](crate::Object)'s
/// [`Key`](crate::Object::Key) and for a [`WorkQueue`](crate::WorkQueue):
/// cheap to clone, hashable, printable, shareable across threads.
///
/// Implemented for every type with those bounds (`String`, `Arc<str>`,
/// tuples, [`ObjectKey`](crate::ObjectKey), your own structs …).
pub trait QueueKey: Eq + Hash + Clone + Debug + Send + Sync + 'static {}

impl<T: Eq + Hash + Clone + Debug + Send + Sync + 'static> QueueKey for T {}
