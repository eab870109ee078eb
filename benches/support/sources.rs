//! The realistic benches' sources of ConfigMap-like objects, and their
//! changes.

#![allow(dead_code)] // each bench uses part of it

use std::sync::Arc;

use parking_lot::Mutex;
use tend::{Change, Revision, Snapshot, Source, SourceError};
use tokio::sync::mpsc;

use crate::config_map::ConfigMap;

/// A source that lists what it was given, once, and never changes.
pub(crate) struct Listed<O = ConfigMap>(pub(crate) Mutex<Option<Vec<O>>>);

#[tend::async_trait]
impl<O: tend::Object> Source for Listed<O> {
    type Object = O;

    fn name(&self) -> &str {
        "config-maps"
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        let objects = self.0.lock().take().unwrap_or_default();
        Ok(Snapshot {
            objects,
            revision: Revision::new(1),
        })
    }

    async fn watch(&self, _from: Revision) -> Result<tend::WatchStream<O>, SourceError> {
        Ok(Box::pin(futures::stream::pending()))
    }
}

/// Called with each object as the watch hands it to the informer.
pub(crate) type Tap = Arc<dyn Fn(&ConfigMap) + Send + Sync>;

/// A source over a channel: an empty list, then every object sent.
pub(crate) struct Channel {
    rx: Mutex<Option<mpsc::UnboundedReceiver<ConfigMap>>>,
    tap: Option<Tap>,
}

impl Channel {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<ConfigMap>) -> Self {
        Self::tapped(rx, None)
    }

    /// Calls `tap`, if any, with each object as the informer takes it.
    pub(crate) fn tapped(rx: mpsc::UnboundedReceiver<ConfigMap>, tap: Option<Tap>) -> Self {
        Self {
            rx: Mutex::new(Some(rx)),
            tap,
        }
    }
}

#[tend::async_trait]
impl Source for Channel {
    type Object = ConfigMap;

    fn name(&self) -> &str {
        "config-maps"
    }

    async fn list(&self) -> Result<Snapshot<ConfigMap>, SourceError> {
        Ok(Snapshot {
            objects: Vec::new(),
            revision: Revision::ZERO,
        })
    }

    async fn watch(&self, _from: Revision) -> Result<tend::WatchStream<ConfigMap>, SourceError> {
        let rx = self.rx.lock().take();
        let rx = rx.ok_or_else(|| SourceError::unavailable("watched once"))?;
        let state = (rx, self.tap.clone());
        let changes = futures::stream::unfold(state, |(mut rx, tap)| async move {
            let object = rx.recv().await?;
            if let Some(tap) = &tap {
                tap(&object);
            }
            Some((Ok(Change::Applied(object)), (rx, tap)))
        });
        Ok(Box::pin(changes))
    }
}

/// The `n`th update of `templates`: a clone with version `n + 1` (versions
/// grow across keys, as an API server's do).
pub(crate) fn update(templates: &[ConfigMap], n: usize) -> ConfigMap {
    ConfigMap {
        version: Revision::new(n as u64 + 1),
        ..templates[n % templates.len()].clone()
    }
}
