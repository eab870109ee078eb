//! The webhook server's metrics: controller-runtime's names where it has
//! them, `tend_webhook_*` beside them.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `controller_runtime_webhook_requests_total` | `webhook`, `code` | requests answered, by HTTP status |
//! | `controller_runtime_webhook_latency_seconds` | `webhook` | from a request's arrival to its answer |
//! | `controller_runtime_webhook_requests_in_flight` | `webhook` | requests being served |
//! | `controller_runtime_webhook_panics_total` | `webhook` | handlers that panicked (controller-runtime's has no label) |
//! | `tend_webhook_timeouts_total` | `webhook` | handlers past their timeout |
//! | `tend_webhook_rejected_requests_total` | `webhook`, `reason` | requests refused before a handler ran: `malformed`, `too_large`, `method`, `busy`, `slow_body` |
//! | `tend_webhook_certificate_reloads_total` | `result` | certificate reloads: `ok`, `failed` |
//!
//! `webhook` is the path, as controller-runtime's. Counters are registered
//! without their `_total` suffix: prometheus-client appends it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Prometheus' default buckets, as controller-runtime's latency uses.
const LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    webhook: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    webhook: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The families, shared by every connection (each is an `Arc` inside).
#[derive(Debug, Clone)]
pub(super) struct Metrics {
    requests: Family<CodeLabels, Counter>,
    latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<WebhookLabels, Gauge>,
    panics: Family<WebhookLabels, Counter>,
    timeouts: Family<WebhookLabels, Counter>,
    rejected: Family<ReasonLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
}

/// A request counted in flight until dropped.
#[derive(Debug)]
pub(super) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    pub(super) fn new() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            panics: Family::default(),
            timeouts: Family::default(),
            rejected: Family::default(),
            reloads: Family::default(),
        }
    }

    /// Registers every family in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code",
            self.requests.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            self.latency.clone(),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served",
            self.in_flight.clone(),
        );
        registry.register(
            "controller_runtime_webhook_panics",
            "Total number of webhook panics",
            self.panics.clone(),
        );
        registry.register(
            "tend_webhook_timeouts",
            "Webhook requests whose handler ran past the webhook's timeout",
            self.timeouts.clone(),
        );
        registry.register(
            "tend_webhook_rejected_requests",
            "Webhook requests refused before a handler ran, by reason",
            self.rejected.clone(),
        );
        registry.register(
            "tend_webhook_certificate_reloads",
            "Reloads of the serving certificate from its files, by result",
            self.reloads.clone(),
        );
    }

    pub(super) fn in_flight(&self, webhook: &str) -> InFlight {
        let gauge = self.in_flight.get_or_create(&labels(webhook)).clone();
        gauge.inc();
        InFlight(gauge)
    }

    pub(super) fn answered(&self, webhook: &str, code: u16, seconds: f64) {
        let labels = CodeLabels {
            webhook: webhook.to_owned(),
            code: code.to_string(),
        };
        self.requests.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&self::labels(webhook))
            .observe(seconds);
    }

    pub(super) fn panicked(&self, webhook: &str) {
        self.panics.get_or_create(&labels(webhook)).inc();
    }

    pub(super) fn timed_out(&self, webhook: &str) {
        self.timeouts.get_or_create(&labels(webhook)).inc();
    }

    pub(super) fn rejected(&self, webhook: &str, reason: &'static str) {
        let labels = ReasonLabels {
            webhook: webhook.to_owned(),
            reason,
        };
        self.rejected.get_or_create(&labels).inc();
    }

    pub(super) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }
}

fn labels(webhook: &str) -> WebhookLabels {
    WebhookLabels {
        webhook: webhook.to_owned(),
    }
}
