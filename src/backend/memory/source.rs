//! The memory store as a [`Source`]: lists under its lock, watches from
//! its history, with the faults it was told to inject.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;

use super::error::InjectedFault;
use super::faults::FaultRoller;
use super::{MemoryStore, watch};
use crate::object::{Object, Revision};
use crate::source::{Snapshot, Source, SourceError, WatchStream};

#[async_trait]
impl<O: Object> Source for MemoryStore<O> {
    type Object = O;

    fn name(&self) -> &str {
        &self.shared.name
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        self.shared.lists.fetch_add(1, Ordering::Relaxed);
        let mut table = self.shared.table.lock();
        if table.failing_lists > 0 {
            table.failing_lists -= 1;
            return Err(SourceError::unavailable(InjectedFault::List));
        }
        Ok(table.snapshot())
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<O>, SourceError> {
        let number = self.shared.watches.fetch_add(1, Ordering::Relaxed);
        let bookmarks = {
            let table = self.shared.table.lock();
            if from < table.compacted() {
                return Err(SourceError::Expired {
                    requested: from,
                    compacted: table.compacted(),
                });
            }
            table.bookmarks
        };
        let faults = self.shared.faults.lock().clone();
        let roller = faults.is_active().then(|| FaultRoller::new(faults, number));
        Ok(watch::open(
            Arc::clone(&self.shared),
            from,
            bookmarks,
            roller,
        ))
    }

    /// The store's revision: exact, as it counts this store's changes only.
    async fn head(&self) -> Result<Option<Revision>, SourceError> {
        Ok(Some(self.revision()))
    }
}
