//! The memory backend of [`Client`]: writes under the table's lock, with
//! an in-process fencing check.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::MemoryStore;
use super::table::Table;
use crate::client::FencingToken;
use crate::client::{Backend, Client, ClientError, Fences, Fencing};
use crate::object::{Object, Revision};
use crate::source::Snapshot;

impl<O: Object> MemoryStore<O> {
    /// A [`Client`] over this store, without a fencing authority: its
    /// writes take effect at once; a [`fenced`](Client::fenced) handle's
    /// writes fail with [`ClientError::NoFencing`].
    #[must_use]
    pub fn client(&self) -> Client<O> {
        Client::new(MemoryBackend {
            store: self.clone(),
            fencing: None,
        })
    }

    /// A [`Client`] over this store whose [`fenced`](Client::fenced)
    /// writes are made only while `fencing` says their token is current,
    /// checked under the store's lock with the write; a stale token fails
    /// with [`ClientError::Fenced`] and changes nothing. Unfenced writes
    /// are not checked.
    ///
    /// # Examples
    ///
    /// A write by a deposed leader of an
    /// [`MemoryElectionGroup`](crate::memory::MemoryElectionGroup) is refused
    /// (the client is fenced by the old leader's candidate, as it would be
    /// on every backend):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use tend::election::LeaderElector;
    /// use tend::memory::{MemoryElectionGroup, MemoryStore};
    ///
    /// #[derive(Clone, Debug, PartialEq)]
    /// struct Note { id: String, version: tend::Revision }
    /// tend::impl_object!(Note, key: id: String, version: version);
    ///
    /// let election = MemoryElectionGroup::new("notes");
    /// let store = MemoryStore::new("notes");
    /// let (old, new) = (election.candidate(), election.candidate());
    /// let client = store.client_fenced_by(&old);
    /// let token = old.campaign().await.unwrap();
    /// election.depose();
    /// new.campaign().await.unwrap();
    ///
    /// let note = Note { id: "a".into(), version: tend::Revision::ZERO };
    /// let error = client.fenced(token).create(note).await.unwrap_err();
    /// assert!(error.is_fenced());
    /// assert!(store.is_empty());
    /// # }
    /// ```
    #[must_use]
    pub fn client_fenced_by(&self, authority: &impl Fences) -> Client<O> {
        Client::new(MemoryBackend {
            store: self.clone(),
            fencing: Some(authority.fencing()),
        })
    }

    /// Runs a write under the table's lock after the fencing check, and
    /// wakes the watches when it landed.
    fn write<T>(
        &self,
        fencing: Option<&dyn Fencing>,
        token: Option<FencingToken>,
        op: impl FnOnce(&mut Table<O>) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut table = self.shared.table.lock();
        if let Some(token) = token {
            let fencing = fencing.ok_or(ClientError::NoFencing)?;
            if !fencing.is_current(token) {
                return Err(ClientError::Fenced { token });
            }
        }
        let written = op(&mut table)?;
        drop(table);
        self.shared.bell.ring();
        Ok(written)
    }
}

/// A [`MemoryStore`] and the authority its fenced writes are checked
/// against.
struct MemoryBackend<O: Object> {
    store: MemoryStore<O>,
    fencing: Option<Arc<dyn Fencing>>,
}

impl<O: Object> fmt::Debug for MemoryBackend<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("store", &self.store)
            .field("fenced", &self.fencing.is_some())
            .finish()
    }
}

impl<O: Object> MemoryBackend<O> {
    fn write<T>(
        &self,
        token: Option<FencingToken>,
        op: impl FnOnce(&mut Table<O>) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        self.store.write(self.fencing.as_deref(), token, op)
    }
}

#[async_trait]
impl<O: Object> Backend for MemoryBackend<O> {
    type Object = O;

    fn fences(&self) -> bool {
        self.fencing.is_some()
    }

    fn name(&self) -> &str {
        &self.store.shared.name
    }

    async fn get(&self, key: &O::Key) -> Result<Option<O>, ClientError> {
        Ok(self.store.get(key))
    }

    async fn head(&self) -> Result<Option<Revision>, ClientError> {
        Ok(Some(self.store.revision()))
    }

    async fn list(&self) -> Result<Snapshot<O>, ClientError> {
        Ok(self.store.snapshot())
    }

    async fn create(&self, object: O, token: Option<FencingToken>) -> Result<O, ClientError> {
        self.write(token, |table| table.create(object))
    }

    async fn update(&self, object: O, token: Option<FencingToken>) -> Result<O, ClientError> {
        self.write(token, |table| table.update(object))
    }

    async fn delete(
        &self,
        key: &O::Key,
        version: Option<Revision>,
        token: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        self.write(token, |table| table.delete(key, version))
    }
}
