//! A source scripted by its test: a list given up front, then every change
//! the test sends, on one watch. It never calls `Object::key` itself.

use std::sync::Mutex;

use futures::StreamExt;
use tend::{Change, Object, Revision, Snapshot, Source, SourceError, WatchStream};
use tokio::sync::mpsc;

pub struct Scripted<O: Object> {
    listed: Vec<O>,
    revision: Revision,
    changes: Mutex<Option<mpsc::UnboundedReceiver<Change<O>>>>,
}

impl<O: Object> Scripted<O> {
    /// A source that lists `listed` at `revision`, and the sender of the
    /// changes its (only) watch delivers.
    pub fn new(listed: Vec<O>, revision: Revision) -> (Self, mpsc::UnboundedSender<Change<O>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let source = Self {
            listed,
            revision,
            changes: Mutex::new(Some(rx)),
        };
        (source, tx)
    }
}

#[tend::async_trait]
impl<O: Object> Source for Scripted<O> {
    type Object = O;

    fn name(&self) -> &str {
        "scripted"
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        Ok(Snapshot {
            objects: self.listed.clone(),
            revision: self.revision,
        })
    }

    async fn watch(&self, _from: Revision) -> Result<WatchStream<O>, SourceError> {
        let rx = self.changes.lock().expect("not poisoned").take();
        let rx = rx.ok_or_else(|| SourceError::unavailable("watched once"))?;
        let changes = futures::stream::unfold(rx, |mut rx| async move {
            let change = rx.recv().await?;
            Some((Ok(change), rx))
        });
        Ok(changes.boxed())
    }
}
