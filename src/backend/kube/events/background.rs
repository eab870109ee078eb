//! `Recorder::emit`'s bounded queue and the task that sends what it holds,
//! so a reconcile never waits for the API server to record an event.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use super::draft::Draft;
use super::{EventError, Publisher, Rules};

/// How many emitted events wait to be sent, by default.
pub(super) const DEFAULT_QUEUE: NonZeroUsize = NonZeroUsize::new(1024).expect("not zero");

/// What [`Recorder::emit`](super::Recorder::emit) did with its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmitStats {
    /// Sent to the API server (a new Event, or a repeat counted in a series).
    pub published: u64,
    /// Dropped because the queue was full.
    pub dropped_full: u64,
    /// Dropped because their token was no longer current when sent.
    pub dropped_fenced: u64,
    /// Refused by the API server or not delivered (logged).
    pub failed: u64,
}

/// One item of the queue.
enum Queued {
    Event {
        /// Boxed: a flush marker need not be the size of an event.
        draft: Box<Draft>,
        rules: Rules,
    },
    /// Answered once every item before it was handled.
    Flush(oneshot::Sender<()>),
}

#[derive(Default)]
struct Counts {
    published: AtomicU64,
    dropped_full: AtomicU64,
    dropped_fenced: AtomicU64,
    failed: AtomicU64,
}

/// The queue, its sending task started by the first emit (inside a
/// runtime) and again by an emit after that runtime ended; the task ends
/// once every recorder sharing it is dropped and the queue is drained.
pub(super) struct Background {
    capacity: NonZeroUsize,
    queue: Mutex<Option<mpsc::Sender<Queued>>>,
    counts: Arc<Counts>,
}

impl Background {
    pub(super) fn new(capacity: NonZeroUsize) -> Self {
        Self {
            capacity,
            queue: Mutex::new(None),
            counts: Arc::default(),
        }
    }

    /// Queues `draft`, or drops and counts it when the queue is full.
    pub(super) fn push(
        &self,
        publisher: &Arc<Publisher>,
        draft: Draft,
        rules: Rules,
    ) -> Result<(), EventError> {
        let queued = Queued::Event {
            draft: Box::new(draft),
            rules,
        };
        let queue = self.queue(publisher)?;
        let queued = match queue.try_send(queued) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(_)) => return Err(self.dropped()),
            Err(TrySendError::Closed(queued)) => queued,
        };
        // Its task ended with the runtime it ran on: a new one on this one.
        let queue = self.restart(publisher, &queue)?;
        queue.try_send(queued).map_err(|_| self.dropped())
    }

    fn dropped(&self) -> EventError {
        self.counts.dropped_full.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            capacity = self.capacity,
            "the event queue is full: an event was dropped"
        );
        EventError::QueueFull
    }

    /// The queue, its task started if this is the first emit.
    fn queue(&self, publisher: &Arc<Publisher>) -> Result<mpsc::Sender<Queued>, EventError> {
        if let Some(queue) = self.queue.lock().as_ref() {
            return Ok(queue.clone());
        }
        self.start(publisher)
    }

    /// A new queue and task, unless another emit already replaced `closed`.
    fn restart(
        &self,
        publisher: &Arc<Publisher>,
        closed: &mpsc::Sender<Queued>,
    ) -> Result<mpsc::Sender<Queued>, EventError> {
        match self.queue.lock().as_ref() {
            Some(queue) if !queue.same_channel(closed) => return Ok(queue.clone()),
            _ => {}
        }
        self.start(publisher)
    }

    fn start(&self, publisher: &Arc<Publisher>) -> Result<mpsc::Sender<Queued>, EventError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| EventError::NoRuntime)?;
        let (sender, receiver) = mpsc::channel(self.capacity.get());
        *self.queue.lock() = Some(sender.clone());
        let (publisher, counts) = (Arc::clone(publisher), Arc::clone(&self.counts));
        runtime.spawn(send_all(publisher, receiver, counts));
        Ok(sender)
    }

    pub(super) fn capacity(&self) -> NonZeroUsize {
        self.capacity
    }

    pub(super) async fn flush(&self) {
        let Some(queue) = self.queue.lock().clone() else {
            return; // nothing was ever emitted
        };
        let (done, handled) = oneshot::channel();
        if queue.send(Queued::Flush(done)).await.is_ok() {
            let _ = handled.await;
        }
    }

    pub(super) fn stats(&self) -> EmitStats {
        let counts = &self.counts;
        EmitStats {
            published: counts.published.load(Ordering::Relaxed),
            dropped_full: counts.dropped_full.load(Ordering::Relaxed),
            dropped_fenced: counts.dropped_fenced.load(Ordering::Relaxed),
            failed: counts.failed.load(Ordering::Relaxed),
        }
    }
}

/// Sends every queued event in order, until every sender is gone.
async fn send_all(
    publisher: Arc<Publisher>,
    mut queue: mpsc::Receiver<Queued>,
    counts: Arc<Counts>,
) {
    while let Some(queued) = queue.recv().await {
        let (draft, rules) = match queued {
            Queued::Event { draft, rules } => (draft, rules),
            Queued::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        match publisher.publish(&draft, &rules).await {
            Ok(()) => counts.published.fetch_add(1, Ordering::Relaxed),
            Err(EventError::Fenced { token }) => {
                tracing::debug!(%token, "an emitted event's token is stale: not sent");
                counts.dropped_fenced.fetch_add(1, Ordering::Relaxed)
            }
            Err(error) => {
                tracing::warn!(%error, "an emitted event could not be published");
                counts.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}
