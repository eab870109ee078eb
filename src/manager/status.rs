//! What `/healthz`, `/readyz` and `/debug/queues` report.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use super::erased::{QueueView, SharedInformer};

/// How many in-flight keys `/debug/queues` lists per controller.
const OLDEST_KEYS: usize = 10;

/// The manager's live state, shared with the HTTP server.
///
/// Flags are atomics; `failed` is a lock held only to copy a string, never
/// across an `.await`.
pub(super) struct Status {
    pub(super) informers: Vec<(String, Arc<dyn SharedInformer>)>,
    pub(super) queues: Vec<(String, Arc<dyn QueueView>)>,
    /// Whether leader election is configured.
    pub(super) elected: bool,
    /// Whether a standby (not leader) counts as ready.
    pub(super) standby_ready: bool,
    pub(super) leader: AtomicBool,
    pub(super) stopping: AtomicBool,
    pub(super) failed: Mutex<Option<String>>,
}

/// A probe's answer: healthy or not, and why.
pub(super) struct Probe {
    pub(super) ok: bool,
    pub(super) text: String,
}

impl Status {
    /// `/healthz`: the manager's tasks are alive (none has failed).
    pub(super) fn health(&self) -> Probe {
        match &*self.failed.lock() {
            Some(failure) => Probe {
                ok: false,
                text: format!("failed: {failure}\n"),
            },
            None => Probe {
                ok: true,
                text: "ok\n".to_owned(),
            },
        }
    }

    /// `/readyz`: every cache synced, and leading (or a standby, if that
    /// counts as ready), and not shutting down.
    pub(super) fn readiness(&self) -> Probe {
        let mut reasons = Vec::new();
        if self.stopping.load(Ordering::Acquire) {
            reasons.push("shutting down".to_owned());
        }
        for (name, informer) in &self.informers {
            if !informer.is_synced() {
                reasons.push(format!("informer `{name}` has not synced"));
            }
        }
        if self.elected && !self.standby_ready && !self.leader.load(Ordering::Acquire) {
            reasons.push("not the leader".to_owned());
        }
        if reasons.is_empty() {
            Probe {
                ok: true,
                text: "ok\n".to_owned(),
            }
        } else {
            Probe {
                ok: false,
                text: format!("not ready: {}\n", reasons.join("; ")),
            }
        }
    }

    /// `/debug/queues`: per controller, the queue's counts and its oldest
    /// in-flight keys.
    pub(super) fn queues(&self) -> Vec<QueueReport> {
        self.queues
            .iter()
            .map(|(name, queue)| {
                let stats = queue.stats();
                QueueReport {
                    controller: name.clone(),
                    queued: stats.ready,
                    delayed: stats.scheduled,
                    in_flight: stats.in_flight,
                    oldest_in_flight: queue
                        .oldest_in_flight(OLDEST_KEYS)
                        .into_iter()
                        .map(|(key, age)| InFlight {
                            key,
                            age_seconds: age.as_secs_f64(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    pub(super) fn set_failed(&self, failure: String) {
        self.failed.lock().get_or_insert(failure);
    }
}

/// One controller's queue, as `/debug/queues` reports it.
#[derive(Debug, Serialize)]
pub(super) struct QueueReport {
    controller: String,
    queued: usize,
    delayed: usize,
    in_flight: usize,
    oldest_in_flight: Vec<InFlight>,
}

/// One in-flight key and how long a worker has held it.
#[derive(Debug, Serialize)]
struct InFlight {
    key: String,
    age_seconds: f64,
}
