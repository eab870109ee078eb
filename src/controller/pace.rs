//! How a worker paces its trips to the queue: runs of keys while
//! reconciles are quick, one key at a time once one is slow.

use std::time::Duration;

use tokio::time::Instant;

use super::Triggers;
use crate::queue::Batch;

/// Keys a worker takes at once from a backlog, while its reconciles are
/// quick: one queue lock per run instead of one per key.
const RUN: usize = 16;

/// A reconcile this short is "quick": a run of them holds its keys from
/// other workers for well under a millisecond.
const QUICK: Duration = Duration::from_micros(50);

/// A worker's pace: see the module docs.
pub(super) struct Pace {
    pub(super) quick: bool,
    /// The clock reading that ended the last reconcile: it starts the next.
    pub(super) last_end: Instant,
    /// Ready keys a run leaves for the other workers.
    pub(super) spare: usize,
}

impl Pace {
    pub(super) fn new(workers: usize) -> Self {
        Self {
            quick: true,
            last_end: Instant::now(),
            spare: workers.saturating_sub(1),
        }
    }

    /// How many keys the next run may take.
    pub(super) fn run(&self) -> usize {
        if self.quick { RUN } else { 1 }
    }

    /// `key`, started at `started`, ended at `ended`. A slow reconcile
    /// that did not wait held the rest of its run: released now, for free
    /// workers to take.
    /// `key` is `None` when the gate holds it (read-your-writes): the gate
    /// ends it.
    pub(super) fn finished<K: crate::QueueKey>(
        &mut self,
        batch: &mut Batch<'_, K, Triggers>,
        key: Option<K>,
        started: Instant,
        ended: Instant,
        waited: bool,
    ) {
        let took = ended.saturating_duration_since(started);
        self.quick &= !waited && took < QUICK;
        if let Some(key) = key {
            batch.finish(key, took);
        }
        self.last_end = ended;
        if !self.quick && batch.has_unstarted() {
            batch.release();
        }
    }
}
