//! The live status page (`/` and `/status`): a static page, its script and
//! style, all compiled into the binary, and `/status.json`, what the
//! script shows, fetched again every second.
//!
//! Only the JSON carries user data (keys, error messages, names), and the
//! script puts it into the page as text nodes, never as markup: a key
//! holding `<script>` shows as those characters. The page's
//! Content-Security-Policy allows scripts from the page's own origin only,
//! so even markup that got in could not run.

use serde::Serialize;
use tokio::time::Instant;

use super::erased::ControllerView;
use super::status::{OLDEST_KEYS, Probe, Status};
use crate::controller::{Outcome, Reconciled};
use crate::informer::InformerStats;
use crate::placement::{Leadership, ShardReport};

/// The page's HTML.
pub(super) const HTML: &str = include_str!("status.html");
/// The page's script.
pub(super) const SCRIPT: &str = include_str!("status.js");
/// The page's style.
pub(super) const STYLE: &str = include_str!("status.css");
/// What the page may load: its own script, style and JSON, nothing else.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// How many in-flight keys the page lists per controller (the oldest).
const PAGE_KEYS: usize = OLDEST_KEYS * 2;

/// `/status.json`: everything the page shows.
#[derive(Debug, Serialize)]
pub(super) struct PageReport {
    health: ProbeReport,
    ready: ProbeReport,
    controllers: Vec<ControllerReport>,
    informers: Vec<InformerReport>,
    election: Option<ElectionReport>,
    shards: Option<ShardReport>,
}

#[derive(Debug, Serialize)]
struct ProbeReport {
    ok: bool,
    text: String,
}

impl From<Probe> for ProbeReport {
    fn from(probe: Probe) -> Self {
        Self {
            ok: probe.ok,
            text: probe.text.trim_end().to_owned(),
        }
    }
}

#[derive(Debug, Serialize)]
struct ControllerReport {
    name: String,
    placement: &'static str,
    /// Whether it may reconcile here now (a standby or a replica owning no
    /// shard may not).
    active: bool,
    queued: usize,
    delayed: usize,
    in_flight: usize,
    /// Held longer than this, a key is stuck (`/healthz` fails); `None`:
    /// no bound.
    stuck_after_seconds: Option<f64>,
    /// The oldest keys in flight.
    keys_in_flight: Vec<KeyInFlight>,
    reconciles: u64,
    failures: u64,
    retries: u64,
    /// The last reconciles, newest first.
    recent: Vec<ReconcileReport>,
    /// The last failures, newest first.
    errors: Vec<ReconcileReport>,
    /// The keys reconciled again and again with a write each time.
    hot_keys: Vec<HotKeyReport>,
    /// Each per-key table's size (`Controller::footprint`), by name.
    tables: [(&'static str, usize); 8],
}

#[derive(Debug, Serialize)]
struct HotKeyReport {
    key: String,
    /// Its reconciles that wrote within the last window.
    writes: f64,
    /// What keeps waking it: `changed ×28, owned ×2`.
    woken_by: String,
    hot_for_seconds: f64,
    spacing_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
struct KeyInFlight {
    key: String,
    age_seconds: f64,
    stuck: bool,
}

#[derive(Debug, Serialize)]
struct ReconcileReport {
    key: String,
    triggers: String,
    attempt: u32,
    /// How long ago it started.
    ago_seconds: f64,
    /// How long it waited to start, from what woke it.
    waited_seconds: f64,
    took_seconds: f64,
    outcome: &'static str,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct InformerReport {
    name: String,
    synced: bool,
    revision: u64,
    objects: usize,
    lists: u64,
    relists: u64,
    watch_restarts: u64,
    events_applied: u64,
    last_progress_ago_seconds: Option<f64>,
    failing_for_seconds: Option<f64>,
    /// How far the cache is behind its source (`None`: not probed).
    lag_revisions: Option<u64>,
    behind_for_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
struct ElectionReport {
    name: String,
    leader: bool,
    token: Option<u64>,
    /// How long it has led, or stood by.
    for_seconds: f64,
}

impl Status {
    /// `/status.json`.
    pub(super) fn page(&self) -> PageReport {
        let now = Instant::now();
        let views = self.controllers.lock().clone();
        let controllers: Vec<_> = views
            .iter()
            .map(|controller| self.controller_report(controller, now))
            .collect();
        // Health after the keys: a key flagged stuck is older still when
        // health looks, so while it is held the page cannot call it healthy.
        PageReport {
            health: self.health().into(),
            ready: self.readiness().into(),
            controllers,
            informers: self
                .informers
                .all()
                .into_iter()
                .map(|(name, informer)| {
                    informer_report(name, informer.is_synced(), &informer.stats(), now)
                })
                .collect(),
            election: self.leadership.as_ref().map(|l| election_report(l, now)),
            shards: self.shards(),
        }
    }

    fn controller_report(&self, controller: &ControllerView, now: Instant) -> ControllerReport {
        let stats = controller.queue.stats();
        let bound = self.stalls.key_bound(controller.reconcile_timeout);
        let held = controller.queue.held_longer_than(None, PAGE_KEYS);
        let totals = controller.journal.totals();
        ControllerReport {
            name: controller.name.clone(),
            placement: controller.placement.as_str(),
            active: self
                .activity
                .is_active(&controller.name, "controller")
                .unwrap_or(false),
            queued: stats.ready,
            delayed: stats.scheduled,
            in_flight: stats.in_flight,
            stuck_after_seconds: bound.map(|b| b.as_secs_f64()),
            keys_in_flight: held
                .oldest
                .into_iter()
                .map(|(key, age)| KeyInFlight {
                    key,
                    age_seconds: age.as_secs_f64(),
                    stuck: bound.is_some_and(|bound| age > bound),
                })
                .collect(),
            reconciles: totals.reconciles,
            failures: totals.failures,
            retries: totals.retries,
            recent: newest_first(controller.journal.reconciles(), now),
            errors: newest_first(controller.journal.failures(), now),
            hot_keys: controller
                .hot_keys
                .hot()
                .into_iter()
                .map(|hot| HotKeyReport {
                    woken_by: crate::controller::describe_woken_by(&hot.woken_by),
                    writes: hot.writes,
                    hot_for_seconds: seconds_since(hot.since, now),
                    spacing_seconds: hot.spacing.map(|s| s.as_secs_f64()),
                    key: hot.key,
                })
                .collect(),
            tables: controller.footprint.sizes().by_name(),
        }
    }
}

fn newest_first(entries: Vec<Reconciled<String>>, now: Instant) -> Vec<ReconcileReport> {
    entries
        .into_iter()
        .rev()
        .map(|entry| ReconcileReport {
            ago_seconds: seconds_since(entry.started, now),
            waited_seconds: entry.waited.as_secs_f64(),
            took_seconds: entry.took.as_secs_f64(),
            triggers: entry.triggers.to_string(),
            attempt: entry.attempt,
            outcome: outcome_name(entry.outcome),
            error: entry.failure.map(|failure| failure.to_string()),
            key: entry.key,
        })
        .collect()
}

fn informer_report(
    name: String,
    synced: bool,
    stats: &InformerStats,
    now: Instant,
) -> InformerReport {
    InformerReport {
        name,
        synced,
        revision: stats.revision.get(),
        objects: stats.cache_size,
        lists: stats.lists,
        relists: stats.relists,
        watch_restarts: stats.watch_restarts,
        events_applied: stats.events_applied,
        last_progress_ago_seconds: stats.last_progress.map(|at| seconds_since(at, now)),
        failing_for_seconds: stats.failing_since.map(|at| seconds_since(at, now)),
        lag_revisions: stats.lag.map(|lag| lag.revisions),
        behind_for_seconds: stats.lag.map(|lag| lag.behind_for.as_secs_f64()),
    }
}

fn election_report(leadership: &Leadership, now: Instant) -> ElectionReport {
    let token = *leadership.term().borrow();
    ElectionReport {
        name: leadership.name().to_owned(),
        leader: token.is_some(),
        token: token.map(|token| token.get()),
        for_seconds: seconds_since(leadership.since(), now),
    }
}

fn seconds_since(at: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(at).as_secs_f64()
}

/// How the page names an outcome.
fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Requeue => "requeue",
        Outcome::RequeueAfter => "requeue after",
        Outcome::Error => "error",
        Outcome::TerminalError => "terminal error",
        Outcome::Panic => "panic",
        Outcome::Timeout => "timeout",
        Outcome::Cancelled => "cancelled",
    }
}
