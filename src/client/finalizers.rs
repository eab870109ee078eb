//! Finalizers: the rules every backend applies to a write of an object
//! with finalizers ([`Object::finalizer_names`]), and the client's `add_finalizer` /
//! `remove_finalizer`.
//!
//! The rules are Kubernetes': a delete of an object with finalizers only
//! marks it (an update at a new revision, seen by watchers as an applied
//! change); no finalizer can be added to a marked object; the write that
//! leaves a marked object without finalizers removes it. The mark belongs
//! to the backend (a create clears it, an update keeps the stored one), so
//! a stored object being deleted always has a finalizer: an object a write
//! returns marked and without finalizers was removed by that write.

use super::{Client, ClientError, Written};
use crate::object::{Deletion, Object};

/// What a backend does with an update, after [`updated`].
#[derive(Debug)]
pub(crate) enum Update<O> {
    /// Cache the object.
    Cache(O),
    /// The update removed the last finalizer of an object being deleted:
    /// remove it (this is its last state).
    Remove(O),
}

/// What a backend does with a delete, after [`deleted`].
#[derive(Debug)]
pub(crate) enum Delete<O> {
    /// No finalizers: remove the object.
    Remove,
    /// Finalizers: store the object marked, instead of removing it.
    Mark(O),
    /// Already marked: nothing to write.
    Marked,
}

/// Clears any deletion mark of an object about to be created.
pub(crate) fn created<O: Object>(object: &mut O) {
    object.set_deletion(None);
}

/// Applies the rules to `next` replacing `stored` (same key, same
/// version): the stored mark is kept, a finalizer added to a marked object
/// is refused, and a marked object left without finalizers is removed.
///
/// # Errors
///
/// [`ClientError::BeingDeleted`] when `next` adds a finalizer to a marked
/// object.
pub(crate) fn updated<O: Object>(stored: &O, mut next: O) -> Result<Update<O>, ClientError> {
    if next.finalizer_names().is_none() {
        return Ok(Update::Cache(next));
    }
    let deletion = stored.deletion();
    next.set_deletion(deletion);
    if deletion.is_none() {
        return Ok(Update::Cache(next));
    }
    let old = stored.finalizer_names().unwrap_or_default();
    let new = next.finalizer_names().unwrap_or_default();
    if new.iter().any(|f| !old.contains(f)) {
        return Err(ClientError::BeingDeleted {
            key: format!("{:?}", next.key()),
        });
    }
    if new.is_empty() {
        return Ok(Update::Remove(next));
    }
    Ok(Update::Cache(next))
}

/// Keeps `stored`'s deletion mark on `next` (an unconditional write, which
/// refuses nothing).
pub(crate) fn keep_mark<O: Object>(stored: &O, next: &mut O) {
    next.set_deletion(stored.deletion());
}

/// What a delete of `stored` does: remove it, or mark it (now, by the wall
/// clock) while it has finalizers.
pub(crate) fn deleted<O: Object>(stored: &O) -> Delete<O> {
    if stored.deletion().is_some() && stored.finalizer_names().is_some() {
        return Delete::Marked;
    }
    if stored.finalizer_names().is_some_and(|f| !f.is_empty()) {
        let mut marked = stored.clone();
        marked.set_deletion(Some(Deletion::now()));
        return Delete::Mark(marked);
    }
    Delete::Remove
}

/// Whether `object`, as a write returned it, was removed by that write.
fn removed<O: Object>(object: &O) -> bool {
    object.deletion().is_some() && object.finalizer_names().is_some_and(<[String]>::is_empty)
}

/// The type has no finalizers.
#[derive(Debug, thiserror::Error)]
#[error("this object type has no finalizers (`Object::finalizer_names` is `None`)")]
struct NoFinalizers;

impl<O: Object> Client<O> {
    /// Adds the finalizer `name` to the object under `key` unless it has
    /// it (then [`Effect::Unchanged`](super::Effect::Unchanged), nothing
    /// written); retries on conflict as [`modify`](Self::modify).
    ///
    /// # Errors
    ///
    /// [`ClientError::BeingDeleted`] when the object is being deleted and
    /// lacks `name`; [`ClientError::Invalid`] when the type has no
    /// finalizers ([`Object::finalizer_names`] is `None`); the errors of [`modify`](Self::modify).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn add_finalizer(&self, key: &O::Key, name: &str) -> Result<Written<O>, ClientError> {
        let written = self
            .modify_if(key, |object| {
                let Some(finalizers) = object.finalizer_names_mut() else {
                    return false;
                };
                let missing = !finalizers.iter().any(|f| f == name);
                if missing {
                    finalizers.push(name.to_owned());
                }
                missing
            })
            .await?;
        if written.object.finalizer_names().is_none() {
            return Err(ClientError::invalid(key, NoFinalizers));
        }
        Ok(written)
    }

    /// Removes the finalizer `name` from the object under `key` if it has
    /// it; retries on conflict as [`modify`](Self::modify). When it was
    /// the last finalizer of an object being deleted, the backend removes
    /// the object. Returns the object as stored after, or `None` when it
    /// is gone (removed by this call, or before it: removing a finalizer
    /// is idempotent, also across restarts).
    ///
    /// # Errors
    ///
    /// [`ClientError::Invalid`] when the type has no finalizers; the
    /// errors of [`modify`](Self::modify) but
    /// [`NotFound`](ClientError::NotFound).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn remove_finalizer(
        &self,
        key: &O::Key,
        name: &str,
    ) -> Result<Option<O>, ClientError> {
        let written = self
            .modify_if(key, |object| {
                // Only when present: a type whose list is optional (a
                // Kubernetes object's) must not read as changed.
                let present = object
                    .finalizer_names()
                    .is_some_and(|f| f.iter().any(|f| f == name));
                if let Some(finalizers) = object.finalizer_names_mut().filter(|_| present) {
                    finalizers.retain(|f| f != name);
                }
                present
            })
            .await;
        match written {
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
            Ok(written) if written.object.finalizer_names().is_none() => {
                Err(ClientError::invalid(key, NoFinalizers))
            }
            Ok(written) if removed(&written.object) => Ok(None),
            Ok(written) => Ok(Some(written.object)),
        }
    }
}
