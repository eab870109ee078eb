//! Writes whose outcome is unknown (`ClientError::Unavailable`: a create
//! whose answer was lost with the server, say). Such a write cannot have
//! landed after the backend's newest revision read once it answers again,
//! so the key waits, in flight, for that head, then for its cache to reach
//! it, as for a write that landed there: its next reconcile sees the write
//! if it landed. Bounded, as every read-your-writes wait, from the end of
//! the reconcile that wrote.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Reconciler;
use super::worker::Worker;
use crate::client::Head;
use crate::object::{Object, Revision};

/// How often a head that could not be read is asked again.
const RETRY: Duration = Duration::from_millis(250);

/// The head of each backend in `unsure`, as needs for the gate, read (and
/// retried while it fails) until `until` or `stop`; a backend that cannot
/// tell, or does not answer in time, adds none.
async fn heads(
    unsure: Vec<(usize, Arc<dyn Head>)>,
    until: Instant,
    stop: &CancellationToken,
) -> Vec<(usize, Revision)> {
    let mut needs = Vec::with_capacity(unsure.len());
    for (cache, head) in unsure {
        if let Some(revision) = read(&*head, until, stop).await {
            needs.push((cache, revision));
        }
    }
    needs
}

async fn read(head: &dyn Head, until: Instant, stop: &CancellationToken) -> Option<Revision> {
    loop {
        let answer = tokio::select! {
            answer = tokio::time::timeout_at(until, head.head()) => answer.ok()?,
            () = stop.cancelled() => return None,
        };
        match answer {
            Ok(revision) => return revision,
            Err(error) => {
                tracing::debug!(%error, "reading the head after a write of unknown outcome");
            }
        }
        let next = Instant::now() + RETRY;
        if next >= until {
            return None;
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = stop.cancelled() => return None,
        }
    }
}

impl<O: Object, R: Reconciler<O>> Worker<O, R> {
    /// Holds `key`, in flight, until the heads of the backends written with
    /// an unknown outcome are read (see the module docs), then as for `writes`
    /// and those heads.
    pub(super) fn hold_for_heads(
        self: &Arc<Self>,
        key: O::Key,
        mut writes: Vec<(usize, Revision)>,
        unsure: Vec<(usize, Arc<dyn Head>)>,
        spacing: Option<Duration>,
        ended: Instant,
        revisions: &[watch::Receiver<Revision>],
    ) {
        let worker = Arc::clone(self);
        let revisions = revisions.to_vec();
        let bound = self
            .gate
            .as_ref()
            .map_or(Duration::ZERO, |gate| gate.bound());
        let until = crate::time::deadline(ended, bound);
        tokio::spawn(async move {
            writes.extend(heads(unsure, until, &worker.stopping).await);
            if let Some(key) = worker.end_or_hold(key, writes, spacing, ended, &revisions) {
                let _ = worker.sink.queue.done(&key);
            }
        });
    }
}
