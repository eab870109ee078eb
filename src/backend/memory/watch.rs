//! The memory backend's watch stream: a cursor over the shared history, with
//! optional fault injection. Pull-based: a watcher buffers at most one batch
//! of changes read under one lock (`READ_BATCH`); a slow one falls behind
//! and, once the history is compacted past what it has read, gets
//! [`SourceError::Expired`].

use std::collections::VecDeque;
use std::sync::Arc;

use super::Shared;
use super::error::InjectedFault;
use super::faults::{Fate, FaultRoller};
use super::table::Next;
use crate::object::{Object, Revision};
use crate::source::{Change, SourceError, WatchStream};

/// One open watch.
struct Cursor<O: Object> {
    shared: Arc<Shared<O>>,
    /// The revision of the last change read from the history.
    position: Revision,
    bookmarks_seen: u64,
    faults: Option<FaultRoller>,
    /// Changes ready to deliver (duplicates and released held changes).
    ready: VecDeque<Change<O>>,
    /// A change held back to be delivered after the next one.
    held: Option<Change<O>>,
    delivered: usize,
    finished: bool,
    /// Changes read under one lock, kept to reuse its allocation.
    batch: Vec<Change<O>>,
}

/// Changes read from the history per lock: a watcher that keeps up with a
/// busy writer takes the writer's lock once per batch, not once per change.
const READ_BATCH: usize = 256;

pub(super) fn open<O: Object>(
    shared: Arc<Shared<O>>,
    from: Revision,
    bookmarks_seen: u64,
    faults: Option<FaultRoller>,
) -> WatchStream<O> {
    let cursor = Cursor {
        shared,
        position: from,
        bookmarks_seen,
        faults,
        ready: VecDeque::new(),
        held: None,
        delivered: 0,
        finished: false,
        batch: Vec::new(),
    };
    Box::pin(futures::stream::unfold(cursor, |mut cursor| async move {
        let item = cursor.next().await?;
        Some((item, cursor))
    }))
}

impl<O: Object> Cursor<O> {
    async fn next(&mut self) -> Option<Result<Change<O>, SourceError>> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(limit) = self.faults.as_ref().and_then(FaultRoller::cut_after)
                && self.delivered >= limit
            {
                self.finished = true;
                let fault = InjectedFault::WatchCut {
                    events: self.delivered,
                };
                return Some(Err(SourceError::unavailable(fault)));
            }
            if let Some(change) = self.ready.pop_front() {
                self.delivered += 1;
                return Some(Ok(change));
            }
            match self.read() {
                Read::Changes => {
                    if let Some(delay) = self.faults.as_mut().and_then(FaultRoller::delay) {
                        tokio::time::sleep(delay).await;
                    }
                    let mut batch = std::mem::take(&mut self.batch);
                    for change in batch.drain(..) {
                        self.inject(change);
                    }
                    self.batch = batch;
                }
                Read::Deliver(item) => return Some(item),
                Read::Wait => {
                    if let Some(held) = self.held.take() {
                        self.ready.push_back(held);
                        continue;
                    }
                    let shared = Arc::clone(&self.shared);
                    shared.bell.sleep_unless(|| !self.has_news()).await;
                }
            }
        }
    }

    fn read(&mut self) -> Read<O> {
        let table = self.shared.table.lock();
        match table.next_after(self.position) {
            Next::Change(change) => {
                self.position = change.revision();
                self.batch.push(change);
                while self.batch.len() < READ_BATCH {
                    let Next::Change(change) = table.next_after(self.position) else {
                        break;
                    };
                    self.position = change.revision();
                    self.batch.push(change);
                }
                Read::Changes
            }
            Next::Expired(error) => {
                self.finished = true;
                Read::Deliver(Err(error))
            }
            // A held-back change goes out before a bookmark that covers it:
            // reordering never crosses a bookmark.
            Next::UpToDate if table.bookmarks > self.bookmarks_seen && self.held.is_some() => {
                Read::Wait
            }
            Next::UpToDate if table.bookmarks > self.bookmarks_seen => {
                self.bookmarks_seen = table.bookmarks;
                Read::Deliver(Ok(Change::Bookmark(table.revision())))
            }
            Next::UpToDate => Read::Wait,
        }
    }

    /// Whether `read` would find something (the bookmark condition ignores
    /// a held change: there is none when the cursor sleeps).
    fn has_news(&self) -> bool {
        let table = self.shared.table.lock();
        self.position < table.revision() || table.bookmarks > self.bookmarks_seen
    }

    fn inject(&mut self, change: Change<O>) {
        let may_hold = self.held.is_none();
        let fate = match &mut self.faults {
            Some(roller) => roller.roll(may_hold),
            None => Fate::Deliver {
                copies: 1,
                hold: false,
            },
        };
        match fate {
            Fate::Drop => {}
            Fate::Deliver { hold: true, .. } => self.held = Some(change),
            Fate::Deliver {
                copies,
                hold: false,
            } => {
                for _ in 1..copies {
                    self.ready.push_back(change.clone());
                }
                self.ready.push_back(change);
                if let Some(held) = self.held.take() {
                    self.ready.push_back(held);
                }
            }
        }
    }
}

enum Read<O: Object> {
    /// Changes were read into the cursor's batch.
    Changes,
    Deliver(Result<Change<O>, SourceError>),
    Wait,
}
