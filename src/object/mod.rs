//! The object model, the crate's ground floor: what a controller observes.
//!
//! An [`Object`] is one item of state: a pod, a DNS record, a thermostat's
//! reading. It has a user-chosen key (same key ⇒ same object identity) and a
//! [`Revision`] that changes whenever the object changes. [`ObjectKey`] is
//! a ready-made namespaced key, [`Lifecycle`] the finalizers and deletion
//! mark of objects that support them, and [`impl_object!`](crate::impl_object)
//! implements [`Object`] in one line.

mod key;
mod lifecycle;
mod revision;
mod selector;

use std::collections::BTreeMap;

use crate::key::QueueKey;

pub use self::key::ObjectKey;
pub use self::lifecycle::{Deletion, Lifecycle};
pub use self::revision::Revision;
pub use self::selector::{LabelSelector, SelectorError};

/// One item of state that a controller observes.
///
/// This trait is the one place where the bounds every part of tend needs are
/// bundled: objects are cloned into caches and shared across threads.
///
/// Implementing it takes a key and a version field:
///
/// ```
/// use tend::{Object, ObjectKey, Revision};
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Pod {
///     namespace: String,
///     name: String,
///     node: Option<String>,
///     version: Revision,
/// }
///
/// impl Object for Pod {
///     type Key = ObjectKey;
///
///     fn key(&self) -> ObjectKey {
///         ObjectKey::new(&self.namespace, &self.name)
///     }
///
///     fn version(&self) -> Revision {
///         self.version
///     }
///
///     fn set_version(&mut self, version: Revision) {
///         self.version = version;
///     }
/// }
/// ```
///
/// # Versions
///
/// Backends assign versions: on every write they call
/// [`set_version`](Object::set_version) with the revision of that write. A
/// version of [`Revision::ZERO`] means "never stored". Objects handed to a
/// source's write methods carry the version the writer last read, which is
/// how the [`memory`](crate::memory) backend detects conflicting writes.
///
/// # Generations
///
/// A generation changes only when an object's *spec* (its desired part)
/// changes, not when its status does; predicates use it to skip status-only
/// updates. Types that want one override [`generation`](Object::generation),
/// [`set_generation`](Object::set_generation) and
/// [`spec_changed`](Object::spec_changed); backends that support generations
/// set 1 on create and bump it on every update whose spec changed.
///
/// # Finalizers
///
/// Types that support finalizers (cleanup that must run before an object
/// goes, exactly once across restarts) keep a [`Lifecycle`] and override
/// [`lifecycle`](Object::lifecycle) and
/// [`lifecycle_mut`](Object::lifecycle_mut); the default (`None`) means the
/// type has none and a delete removes the object at once.
pub trait Object: Clone + Send + Sync + 'static {
    /// The identity of an object: two objects with the same key are two
    /// states of the same thing.
    type Key: QueueKey;

    /// This object's key.
    fn key(&self) -> Self::Key;

    /// This object's key, borrowed, when the object holds it as it is
    /// (default: `None`; [`impl_object!`](crate::impl_object) returns the
    /// key field). It must equal [`key`](Object::key), be cheap, and give the
    /// same answer every time for the same object. The informer's cache
    /// table then keeps no copy of the key (it finds the object by the key
    /// inside it; an index still keeps its own), a change is applied without
    /// copying its key, and back-to-back changes of one key within a run of
    /// events are queued with one copy.
    ///
    /// # Examples
    ///
    /// A hand-written implementation whose key is a field lends it:
    ///
    /// ```
    /// use tend::{Object, ObjectKey, Revision};
    ///
    /// #[derive(Clone, Debug)]
    /// struct Volume { key: ObjectKey, version: Revision }
    ///
    /// impl Object for Volume {
    ///     type Key = ObjectKey;
    ///     fn key(&self) -> ObjectKey { self.key.clone() }
    ///     fn key_ref(&self) -> Option<&ObjectKey> { Some(&self.key) }
    ///     fn version(&self) -> Revision { self.version }
    ///     fn set_version(&mut self, version: Revision) { self.version = version; }
    /// }
    ///
    /// let volume = Volume { key: ObjectKey::new("default", "data"), version: Revision::ZERO };
    /// assert_eq!(volume.key_ref(), Some(&volume.key()));
    /// ```
    fn key_ref(&self) -> Option<&Self::Key> {
        None
    }

    /// The revision of the write that produced this state
    /// ([`Revision::ZERO`] when never stored).
    fn version(&self) -> Revision;

    /// Sets the version; called by backends on every write.
    fn set_version(&mut self, version: Revision);

    /// The generation, if this type tracks one (default: `None`).
    fn generation(&self) -> Option<u64> {
        None
    }

    /// Sets the generation; called by backends when this type tracks one
    /// (default: does nothing).
    fn set_generation(&mut self, generation: u64) {
        let _ = generation;
    }

    /// Whether this object's spec differs from `old`'s (default: `false`,
    /// the generation never moves after create).
    fn spec_changed(&self, old: &Self) -> bool {
        let _ = old;
        false
    }

    /// The labels, if this type has them (default: `None`; a Kubernetes
    /// object's are its `metadata.labels`). The label predicates and
    /// [`LabelSelector`] read them.
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        None
    }

    /// The annotations, if this type has them (default: `None`; a
    /// Kubernetes object's are its `metadata.annotations`).
    fn annotations(&self) -> Option<&BTreeMap<String, String>> {
        None
    }

    /// The finalizers and deletion mark, if this type supports finalizers
    /// (default: `None`).
    fn lifecycle(&self) -> Option<&Lifecycle> {
        None
    }

    /// The finalizers and deletion mark, to change them (default: `None`,
    /// as [`lifecycle`](Object::lifecycle)).
    fn lifecycle_mut(&mut self) -> Option<&mut Lifecycle> {
        None
    }

    /// The finalizers, if this type supports them (default: the
    /// [`lifecycle`](Object::lifecycle)'s). Backends and the client's
    /// finalizer helpers go through this and the three below, so a type
    /// that keeps its finalizers elsewhere (a Kubernetes object's
    /// `metadata`) overrides these four instead of keeping a [`Lifecycle`].
    /// (Not `finalizers`: kube-rs's `ResourceExt` has a method of that
    /// name, and both traits are often in scope.)
    fn finalizer_names(&self) -> Option<&[String]> {
        self.lifecycle().map(Lifecycle::finalizers)
    }

    /// The finalizers, to change them (default: the lifecycle's; `None`
    /// when the type has none).
    fn finalizer_names_mut(&mut self) -> Option<&mut Vec<String>> {
        self.lifecycle_mut().map(Lifecycle::finalizers_mut)
    }

    /// When a delete was asked for, if this object is being deleted (it
    /// waits for its finalizers to be removed).
    fn deletion(&self) -> Option<Deletion> {
        self.lifecycle().and_then(Lifecycle::deletion)
    }

    /// Sets or clears the deletion mark; called by backends (default: the
    /// lifecycle's, and nothing for a type without finalizers).
    fn set_deletion(&mut self, deletion: Option<Deletion>) {
        if let Some(lifecycle) = self.lifecycle_mut() {
            lifecycle.set_deletion(deletion);
        }
    }
}

/// Implements [`Object`] for a struct whose key is a field (cloned) and whose
/// version is a [`Revision`] field: the common case, in one line.
///
/// ```
/// #[derive(Clone, Debug)]
/// struct Pod {
///     name: String,
///     node: String,
///     version: tend::Revision,
/// }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// use tend::Object;
/// let pod = Pod { name: "web-1".into(), node: "n1".into(), version: tend::Revision::ZERO };
/// assert_eq!(pod.key(), "web-1");
/// ```
///
/// With `lifecycle: field`, the type supports finalizers, kept in a
/// [`Lifecycle`] field:
///
/// ```
/// #[derive(Clone, Debug)]
/// struct Volume {
///     name: String,
///     lifecycle: tend::Lifecycle,
///     version: tend::Revision,
/// }
/// tend::impl_object!(Volume, key: name: String, version: version, lifecycle: lifecycle);
/// ```
///
/// With `labels: field` and `annotations: field` (after `lifecycle`, when
/// there is one), `BTreeMap<String, String>` fields are the object's
/// labels and annotations, which the label predicates and
/// [`LabelSelector`] read:
///
/// ```
/// use std::collections::BTreeMap;
/// use tend::{LabelSelector, Object};
///
/// #[derive(Clone, Debug)]
/// struct Site {
///     name: String,
///     labels: BTreeMap<String, String>,
///     notes: BTreeMap<String, String>,
///     version: tend::Revision,
/// }
/// tend::impl_object!(Site, key: name: String, version: version, labels: labels, annotations: notes);
///
/// let site = Site {
///     name: "blog".into(),
///     labels: BTreeMap::from([("tier".into(), "web".into())]),
///     notes: BTreeMap::new(),
///     version: tend::Revision::ZERO,
/// };
/// let web: LabelSelector = "tier=web".parse()?;
/// assert!(web.matches(site.labels()));
/// assert_eq!(site.annotations(), Some(&BTreeMap::new()));
/// # Ok::<(), tend::SelectorError>(())
/// ```
///
/// Types with a generation implement [`Object`] by hand.
#[macro_export]
macro_rules! impl_object {
    (
        $type:ty, key: $key:ident: $key_type:ty, version: $version:ident
        $(, lifecycle: $lifecycle:ident)?
        $(, labels: $labels:ident)?
        $(, annotations: $annotations:ident)?
        $(,)?
    ) => {
        impl $crate::Object for $type {
            type Key = $key_type;
            fn key(&self) -> $key_type {
                ::std::clone::Clone::clone(&self.$key)
            }
            fn key_ref(&self) -> ::std::option::Option<&$key_type> {
                ::std::option::Option::Some(&self.$key)
            }
            fn version(&self) -> $crate::Revision {
                self.$version
            }
            fn set_version(&mut self, version: $crate::Revision) {
                self.$version = version;
            }
            $(
                fn lifecycle(&self) -> ::std::option::Option<&$crate::Lifecycle> {
                    ::std::option::Option::Some(&self.$lifecycle)
                }
                fn lifecycle_mut(&mut self) -> ::std::option::Option<&mut $crate::Lifecycle> {
                    ::std::option::Option::Some(&mut self.$lifecycle)
                }
            )?
            $(
                fn labels(
                    &self,
                ) -> ::std::option::Option<&::std::collections::BTreeMap<::std::string::String, ::std::string::String>> {
                    ::std::option::Option::Some(&self.$labels)
                }
            )?
            $(
                fn annotations(
                    &self,
                ) -> ::std::option::Option<&::std::collections::BTreeMap<::std::string::String, ::std::string::String>> {
                    ::std::option::Option::Some(&self.$annotations)
                }
            )?
        }
    };
}
