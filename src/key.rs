//! What a key must be: one trait for the keys of objects and of the queue.

use std::fmt::Debug;
use std::hash::Hash;

/// What a key must be, for an [`Object`](crate::Object)'s
/// [`Key`](crate::Object::Key) and for a [`WorkQueue`](crate::WorkQueue):
/// cheap to clone, hashable, printable, shareable across threads.
///
/// Implemented for every type with those bounds (`String`, `Arc<str>`,
/// tuples, [`ObjectKey`](crate::ObjectKey), your own structs …).
///
/// # Examples
///
/// ```
/// use tend::{QueueKey, WorkQueue};
///
/// /// A key of your own: nothing to implement, the derives are enough.
/// #[derive(Clone, Debug, PartialEq, Eq, Hash)]
/// struct Tenant { region: &'static str, id: u32 }
///
/// fn takes_a_key<K: QueueKey>(key: K) -> K { key }
/// let key = takes_a_key(Tenant { region: "eu", id: 7 });
///
/// let queue = WorkQueue::new();
/// queue.add(key.clone());
/// queue.add(key); // the same key: deduplicated
/// assert_eq!(queue.len(), 1);
/// ```
pub trait QueueKey: Eq + Hash + Clone + Debug + Send + Sync + 'static {}

impl<T: Eq + Hash + Clone + Debug + Send + Sync + 'static> QueueKey for T {}
