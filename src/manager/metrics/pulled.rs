//! `Pulled`: the queue depths, in-flight ages and informer counters read
//! at scrape time.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{ControllerLabels, NameLabels, QueueGroupLabels, QueueLabels};
use crate::manager::erased::{FootprintView, QueueView, SharedInformer};

type QueueEntry = (QueueLabels, Arc<dyn QueueView>);
type InformerEntry = (NameLabels, Arc<dyn SharedInformer>);
type FootprintEntry = (ControllerLabels, Arc<dyn FootprintView>);

/// A controller's labels and one of its per-key tables.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    controller: String,
    table: &'static str,
}

/// The metrics read at scrape time.
///
/// The lists are only appended to while the manager is being configured;
/// their locks are never held across an `.await`.
#[derive(Default)]
pub(super) struct Pulled {
    pub(super) queues: Mutex<Vec<QueueEntry>>,
    pub(super) informers: Mutex<Vec<InformerEntry>>,
    pub(super) footprints: Mutex<Vec<FootprintEntry>>,
}

impl std::fmt::Debug for Pulled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pulled")
            .field("queues", &self.queues.lock().len())
            .field("informers", &self.informers.lock().len())
            .field("footprints", &self.footprints.lock().len())
            .finish()
    }
}

impl Collector for Pulled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues: Vec<_> = self
            .queues
            .lock()
            .iter()
            .map(|(labels, queue)| (labels.clone(), queue.stats()))
            .collect();
        // Pulled at scrape time, like the other queue gauges: one consistent
        // snapshot per queue.
        encode_gauges(
            &mut encoder,
            "workqueue_depth",
            "Current depth of workqueue",
            queues
                .iter()
                .map(|(l, s)| (l, i64::try_from(s.ready).unwrap_or(i64::MAX))),
        )?;
        encode_gauges(
            &mut encoder,
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            queues
                .iter()
                .map(|(l, s)| (l, s.unfinished_work.as_secs_f64())),
        )?;
        encode_gauges(
            &mut encoder,
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            queues
                .iter()
                .map(|(l, s)| (l, s.longest_running.unwrap_or_default().as_secs_f64())),
        )?;
        encode_groups(&mut encoder, &self.queues.lock())?;
        encode_tables(&mut encoder, &self.footprints.lock())?;
        let informers: Vec<_> = self
            .informers
            .lock()
            .iter()
            .map(|(labels, informer)| (labels.clone(), informer.stats()))
            .collect();
        encode_informers(&mut encoder, &informers)
    }
}

fn encode_gauges<'a, L: EncodeLabelSet + 'a, V: EncodeGaugeValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (&'a L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in values {
        ConstGauge::new(value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// The queue depth of each group named for metrics:
/// `tend_workqueue_group_depth{name, controller, group}`.
fn encode_groups(
    encoder: &mut DescriptorEncoder,
    queues: &[QueueEntry],
) -> Result<(), std::fmt::Error> {
    let series: Vec<_> = queues
        .iter()
        .flat_map(|(labels, queue)| {
            queue.metered_groups().into_iter().map(|(group, depth)| {
                let labels = QueueGroupLabels {
                    name: labels.name.clone(),
                    controller: labels.controller.clone(),
                    group,
                };
                (labels, i64::try_from(depth).unwrap_or(i64::MAX))
            })
        })
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    encode_gauges(
        encoder,
        "tend_workqueue_group_depth",
        "Keys ready in the work queue, of one key group named for metrics",
        series.iter().map(|(labels, depth)| (labels, *depth)),
    )
}

/// `tend_controller_table_keys{controller, table}`: the keys each per-key
/// table of a controller holds (`Controller::footprint`).
fn encode_tables(
    encoder: &mut DescriptorEncoder,
    footprints: &[FootprintEntry],
) -> Result<(), std::fmt::Error> {
    let series: Vec<_> = footprints
        .iter()
        .flat_map(|(labels, footprint)| {
            let sizes = footprint.sizes().by_name();
            sizes.into_iter().map(move |(table, size)| {
                let labels = TableLabels {
                    controller: labels.controller.clone(),
                    table,
                };
                (labels, i64::try_from(size).unwrap_or(i64::MAX))
            })
        })
        .collect();
    encode_gauges(
        encoder,
        "tend_controller_table_keys",
        "Keys held by one of a controller's per-key tables (queue, rate limiter, last states, ...): a table that only grows is a leak",
        series.iter().map(|(labels, keys)| (labels, *keys)),
    )
}

/// The informer counters: `tend_informer_*{name}`.
fn encode_informers(
    encoder: &mut DescriptorEncoder,
    informers: &[(NameLabels, crate::informer::InformerStats)],
) -> Result<(), std::fmt::Error> {
    type Field = fn(&crate::informer::InformerStats) -> u64;
    let counters: [(&str, &str, Field); 7] = [
        ("tend_informer_lists", "Lists made by the informer", |s| {
            s.lists
        }),
        (
            "tend_informer_relists",
            "Lists made after the informer's first successful one",
            |s| s.relists,
        ),
        (
            "tend_informer_watch_restarts",
            "Watches reopened after a watch failed or ended",
            |s| s.watch_restarts,
        ),
        (
            "tend_informer_events_applied",
            "Watch changes applied to the cache",
            |s| s.events_applied,
        ),
        (
            "tend_informer_stale_events_ignored",
            "Changes ignored because the cache held the same or a newer state",
            |s| s.stale_ignored,
        ),
        ("tend_informer_resyncs", "Resync rounds delivered", |s| {
            s.resyncs
        }),
        (
            "tend_informer_out_of_scope",
            "Listed or watched objects left out of a scoped cache: sent by the source for nothing",
            |s| s.out_of_scope,
        ),
    ];
    for (name, help, field) in counters {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, stats) in informers {
            ConstCounter::new(field(stats)).encode(family.encode_family(labels)?)?;
        }
    }
    encode_gauges(
        encoder,
        "tend_informer_cache_size",
        "Objects in the informer's cache",
        informers
            .iter()
            .map(|(l, s)| (l, i64::try_from(s.cache_size).unwrap_or(i64::MAX))),
    )?;
    encode_lags(encoder, informers)
}

/// `tend_informer_lag_*{name}`, for the informers whose source's head was
/// probed.
fn encode_lags(
    encoder: &mut DescriptorEncoder,
    informers: &[(NameLabels, crate::informer::InformerStats)],
) -> Result<(), std::fmt::Error> {
    let lagging = || informers.iter().filter_map(|(l, s)| Some((l, s.lag?)));
    encode_gauges(
        encoder,
        "tend_informer_lag_revisions",
        "How many revisions the informer's cache is behind its source's newest, as last probed",
        lagging().map(|(l, lag)| (l, i64::try_from(lag.revisions).unwrap_or(i64::MAX))),
    )?;
    encode_gauges(
        encoder,
        "tend_informer_lag_seconds",
        "For how long the informer's cache has lacked a revision its source had (0 while current)",
        lagging().map(|(l, lag)| (l, lag.behind_for.as_secs_f64())),
    )
}
