//! Turns an etcd watch into a stream of [`Change`]s.

use std::collections::VecDeque;
use std::sync::Arc;

use etcd_client::WatchResponse;

use super::codec::EtcdObject;
use super::codec::revision;
use super::source::{Decoded, Shared};
use crate::object::{Object, Revision};
use crate::source::{Change, SourceError, WatchStream};

/// Why an etcd watch was cancelled without a compaction.
#[derive(Debug, thiserror::Error)]
#[error("etcd cancelled the watch: {reason}")]
struct Cancelled {
    reason: String,
}

/// The stream's state between polls.
struct Watch<O: Object> {
    shared: Arc<Shared<O>>,
    stream: etcd_client::WatchStream,
    /// Changes of the last response not yet yielded.
    pending: VecDeque<Change<O>>,
    /// The revision the watch was opened after.
    from: Revision,
    /// The latest revision yielded.
    seen: Revision,
    /// Set once the stream yielded an error: it ends after that.
    failed: bool,
}

/// A stream of every change after `from` under the source's prefix.
pub(super) fn open<O>(
    shared: Arc<Shared<O>>,
    stream: etcd_client::WatchStream,
    from: Revision,
) -> WatchStream<O>
where
    O: EtcdObject,
{
    let state = Watch {
        shared,
        stream,
        pending: VecDeque::new(),
        from,
        seen: from,
        failed: false,
    };
    Box::pin(futures::stream::unfold(state, |mut watch| async move {
        let item = watch.next().await?;
        Some((item, watch))
    }))
}

impl<O> Watch<O>
where
    O: EtcdObject,
{
    async fn next(&mut self) -> Option<Result<Change<O>, SourceError>> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Some(Ok(change));
            }
            if self.failed {
                return None;
            }
            let response = match self.stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return None,
                Err(error) => {
                    self.failed = true;
                    return Some(Err(SourceError::unavailable(error)));
                }
            };
            if let Err(error) = self.on_response(&response) {
                self.failed = true;
                return Some(Err(error));
            }
        }
    }

    /// Queues the changes of one response, or says why the watch ended.
    fn on_response(&mut self, response: &WatchResponse) -> Result<(), SourceError> {
        if response.compact_revision() != 0 {
            // etcd keeps the compaction revision itself: a watch may start
            // there, so the last revision it has no history for is one less.
            return Err(SourceError::Expired {
                requested: self.from,
                compacted: revision(response.compact_revision().saturating_sub(1)),
            });
        }
        if response.canceled() {
            return Err(SourceError::unavailable(Cancelled {
                reason: response.cancel_reason().to_owned(),
            }));
        }
        if response.created() {
            // The header of the creation response is the store's revision,
            // not the watch's: the history up to it is still to come.
            return Ok(());
        }
        if response.events().is_empty() {
            // A progress notification: etcd sends them only to watchers
            // that have caught up, so nothing up to here is missing.
            let at = revision(response.header().map_or(0, |h| h.revision()));
            if at > self.seen {
                self.seen = at;
                self.pending.push_back(Change::Bookmark(at));
            }
            return Ok(());
        }
        for kv in response.events().iter().filter_map(|event| event.kv()) {
            self.on_event(kv);
        }
        Ok(())
    }

    /// One put or delete of a watch response.
    fn on_event(&mut self, kv: &etcd_client::KeyValue) {
        if !is_after(kv.mod_revision(), self.from) {
            // etcd-io/etcd#20221: a watch from a future revision can
            // deliver older events; the informer has them already.
            return;
        }
        let at = revision(kv.mod_revision());
        self.seen = self.seen.max(at);
        // A deletion's key-value is a tombstone with version 0; a put's
        // version is at least 1 (this avoids `event_type`, which panics
        // on an unknown type).
        if kv.version() == 0 {
            self.shared.unskip(kv.key());
            if let Ok(key) = self.shared.decode_key(kv.key()) {
                self.pending
                    .push_back(Change::Deleted { key, revision: at });
            }
            return;
        }
        match self.shared.decode(kv) {
            Decoded::Object(object) => self.pending.push_back(Change::Applied(object)),
            // Absent for tend, as in a list: drop a stale cached copy.
            Decoded::BadValue(key) => {
                self.pending
                    .push_back(Change::Deleted { key, revision: at });
            }
            Decoded::BadKey => {}
        }
    }
}

/// Whether an event at `mod_revision` is after `from`, the revision the
/// watch was opened after (etcd may deliver older ones, see
/// etcd-io/etcd#20221).
fn is_after(mod_revision: i64, from: Revision) -> bool {
    u64::try_from(mod_revision).is_ok_and(|at| at > from.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_at_or_before_the_start_revision_are_dropped() {
        let from = Revision::new(10);
        assert!(!is_after(9, from));
        assert!(!is_after(10, from));
        assert!(is_after(11, from));
        assert!(!is_after(-1, from));
        assert!(is_after(1, Revision::ZERO));
    }
}
