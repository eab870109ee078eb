//! Read-modify-write helpers: `modify` (client-go's `retry.RetryOnConflict`)
//! and `create_or_update` (controller-runtime's `CreateOrUpdate`).
//!
//! Both tell "unchanged" by comparing the object after the change with the
//! object read (`O: PartialEq`), not by trusting the closure to say so: a
//! closure that forgot to report a change would lose a write, while a
//! comparison costs one clone and one `==`. A change that leaves the object
//! equal writes nothing (no new revision, no watch event).

use super::{Client, ClientError};
use crate::object::Object;

/// What [`Client::modify`] or [`Client::create_or_update`] did.
///
/// # Examples
///
/// ```
/// use tend::client::Effect;
/// use tend::memory::MemoryStore;
/// use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)] struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::client::ClientError> {
/// let store = MemoryStore::new("lights");
/// let lights = store.client();
/// lights.create(Light { room: "hall".into(), on: false, version: Revision::ZERO }).await?;
/// let hall = "hall".to_owned();
/// assert_eq!(lights.modify(&hall, |light| light.on = true).await?.effect, Effect::Updated);
/// assert_eq!(lights.modify(&hall, |light| light.on = true).await?.effect, Effect::Unchanged);
/// assert_eq!(store.revision(), Revision::new(2)); // the second wrote nothing
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// The object did not exist and was created.
    Created,
    /// The object existed, the change altered it, and it was written.
    Updated,
    /// The object existed and the change left it equal: nothing written.
    Unchanged,
}

/// The object as stored after [`Client::modify`] or
/// [`Client::create_or_update`], and what was done.
///
/// # Examples
///
/// ```
/// use tend::client::{Effect, Written};
/// use tend::memory::MemoryStore;
/// use tend::Revision;
/// # #[derive(Clone, Debug, PartialEq)] struct Light { room: String, on: bool, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tend::client::ClientError> {
/// let lights = MemoryStore::new("lights").client();
/// let hall = Light { room: "hall".into(), on: false, version: Revision::ZERO };
/// let Written { object, effect } = lights.create_or_update(hall.clone(), |l| l.on = true).await?;
/// assert_eq!(effect, Effect::Created);
/// assert!(object.on && object.version > Revision::ZERO); // as stored
///
/// let again = lights.create_or_update(hall, |l| l.on = true).await?;
/// assert_eq!(again, Written { object, effect: Effect::Unchanged }); // nothing to write
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Written<O> {
    /// The object as stored now (with its version).
    pub object: O,
    /// What was done.
    pub effect: Effect,
}

impl<O: Object> Client<O> {
    /// [`modify`](Self::modify) for objects that cannot be compared:
    /// `change` says whether it changed the object (a metadata-only
    /// Kubernetes object's finalizers are written through it).
    pub(crate) async fn modify_if(
        &self,
        key: &O::Key,
        mut change: impl FnMut(&mut O) -> bool + Send,
    ) -> Result<Written<O>, ClientError> {
        for _ in 0..self.attempts.get() {
            let current = self
                .get(key)
                .await?
                .ok_or_else(|| ClientError::not_found(key))?;
            match self.update_changed(current, &mut change).await {
                Err(error) if error.is_conflict() => {}
                written => return written,
            }
        }
        Err(self.exhausted(key))
    }

    /// Writes `current` as `change` leaves it, if it says it changed it.
    async fn update_changed(
        &self,
        current: O,
        change: &mut (impl FnMut(&mut O) -> bool + Send),
    ) -> Result<Written<O>, ClientError> {
        let mut next = current.clone();
        let changed = change(&mut next);
        keeps_key(&current, &next)?;
        if !changed {
            return Ok(Written {
                object: current,
                effect: Effect::Unchanged,
            });
        }
        next.set_version(current.version());
        let object = self.update(next).await?;
        Ok(Written {
            object,
            effect: Effect::Updated,
        })
    }

    fn exhausted(&self, key: &O::Key) -> ClientError {
        ClientError::TooManyConflicts {
            key: format!("{key:?}"),
            attempts: self.attempts.get(),
        }
    }
}

impl<O: Object + PartialEq> Client<O> {
    /// Reads the object under `key`, applies `change` to it and writes it
    /// back if it changed; on a conflict (someone wrote in between) reads
    /// again and re-applies `change`, up to
    /// [`conflict_attempts`](Self::conflict_attempts) times in all (default
    /// [`DEFAULT_CONFLICT_ATTEMPTS`](super::DEFAULT_CONFLICT_ATTEMPTS)), with
    /// no delay between attempts. `change` may therefore run several times,
    /// each time on a fresh read; it must not change the key (refused as
    /// [`ClientError::Invalid`]) and cannot change the version.
    ///
    /// Reports [`Effect::Updated`], or [`Effect::Unchanged`] when the
    /// changed object equals the one read (nothing written).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotFound`] when nothing is stored under `key` (also
    /// when it is deleted between attempts);
    /// [`ClientError::TooManyConflicts`] when every attempt conflicted; any
    /// other error of [`get`](Self::get) or [`update`](Self::update) at
    /// once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn modify(
        &self,
        key: &O::Key,
        mut change: impl FnMut(&mut O) + Send,
    ) -> Result<Written<O>, ClientError> {
        self.modify_if(key, compared(&mut change)).await
    }

    /// Makes the object stored under `object`'s key what `mutate` says:
    /// when absent, `mutate` is applied to `object` and the result created;
    /// when present, `mutate` is applied to the stored object and the result
    /// written if it changed. A conflict or a race with another create or a
    /// delete starts over with a fresh read, up to
    /// [`conflict_attempts`](Self::conflict_attempts) times in all. `mutate`
    /// must not change the key (refused as [`ClientError::Invalid`]).
    ///
    /// Reports [`Effect::Created`], [`Effect::Updated`] or
    /// [`Effect::Unchanged`] (nothing written).
    ///
    /// # Errors
    ///
    /// [`ClientError::TooManyConflicts`] when every attempt lost a race;
    /// any other error of the reads and writes at once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have written the object.
    pub async fn create_or_update(
        &self,
        object: O,
        mut mutate: impl FnMut(&mut O) + Send,
    ) -> Result<Written<O>, ClientError> {
        let key = object.key();
        for _ in 0..self.attempts.get() {
            let written = match self.get(&key).await? {
                Some(current) => {
                    self.update_changed(current, &mut compared(&mut mutate))
                        .await
                }
                None => self.create_mutated(object.clone(), &mut mutate).await,
            };
            match written {
                Err(error) if error.is_conflict() => {}
                Err(error) if error.is_not_found() || error.is_already_exists() => {}
                written => return written,
            }
        }
        Err(self.exhausted(&key))
    }

    /// Applies `change` to `current` and writes the result if it differs.
    /// Applies `mutate` to `object` and creates the result.
    async fn create_mutated(
        &self,
        object: O,
        mutate: &mut (impl FnMut(&mut O) + Send),
    ) -> Result<Written<O>, ClientError> {
        let mut next = object.clone();
        mutate(&mut next);
        keeps_key(&object, &next)?;
        let object = self.create(next).await?;
        Ok(Written {
            object,
            effect: Effect::Created,
        })
    }
}

/// `change`, telling whether it changed the object it was given (its
/// version aside, which it cannot change).
fn compared<O: Object + PartialEq>(
    change: &mut (impl FnMut(&mut O) + Send),
) -> impl FnMut(&mut O) -> bool + Send {
    move |next| {
        let before = next.clone();
        change(next);
        next.set_version(before.version());
        *next != before
    }
}

/// The error of a change that moved the object to another key.
#[derive(Debug, thiserror::Error)]
#[error("the change altered the object's key to {to}")]
struct KeyChanged {
    to: String,
}

fn keeps_key<O: Object>(before: &O, after: &O) -> Result<(), ClientError> {
    let key = after.key();
    if key == before.key() {
        return Ok(());
    }
    Err(ClientError::invalid(
        &before.key(),
        KeyChanged {
            to: format!("{key:?}"),
        },
    ))
}
