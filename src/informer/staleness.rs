//! How far an informer's cache is behind its source: the source's head
//! revision, probed every period, against the newest revision the cache
//! has seen (changes and bookmarks).

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::object::Revision;
use crate::source::Source;

/// The heads a cache has not reached yet that are kept: the oldest (which
/// says since when the cache is behind) and the newest, with the ones
/// between dropped first.
const KEPT_HEADS: usize = 64;
/// The longest a probe may take: a head that comes later is stale anyway.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How far an informer's cache is behind its source, from
/// [`Informer::lag`](super::Informer::lag) and
/// [`InformerStats::lag`](super::InformerStats::lag).
///
/// The informer asks its source for its newest revision (its
/// [head](crate::Source::head)) every probe period and compares it with the
/// newest revision the cache has seen, on every read: the lag drops to zero
/// as soon as the cache catches up, without waiting for the next probe.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new("lights");
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// let informer = Informer::builder(store).lag_probe_every(Duration::from_secs(1)).build()?;
/// let stop = CancellationToken::new();
/// let run = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// informer.wait_synced(Duration::from_secs(60)).await?;
/// tokio::time::sleep(Duration::from_secs(2)).await;
/// let lag = informer.lag().expect("probed");
/// assert_eq!((lag.head, lag.revisions, lag.behind_for), (Revision::new(1), 0, Duration::ZERO));
/// stop.cancel();
/// run.await??;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheLag {
    /// The source's newest revision at the last probe.
    pub head: Revision,
    /// How many revisions the cache is behind that head now (0 once it has
    /// seen it).
    pub revisions: u64,
    /// For how long the cache has lacked a revision the source had: since
    /// the answer of the first probe that showed a head the cache has not
    /// reached yet (zero while it is current). Measured at the probes'
    /// answers, so it may be short by up to one probe period.
    pub behind_for: Duration,
    /// When the last probe answered.
    pub probed: Instant,
}

/// The heads probed, shared by the probe and the readers.
#[derive(Debug, Default)]
pub(crate) struct Staleness {
    heads: Mutex<Heads>,
}

#[derive(Debug, Default)]
struct Heads {
    /// The last probe's head and when it answered.
    last: Option<(Revision, Instant)>,
    /// Heads the cache had not reached when they were probed, oldest first,
    /// with when they were seen; increasing.
    ahead: VecDeque<(Revision, Instant)>,
}

impl Staleness {
    /// The source answered `head` at `at`; the cache had seen `seen`.
    pub(crate) fn observe(&self, head: Revision, at: Instant, seen: Revision) {
        let mut heads = self.heads.lock();
        heads.last = Some((head, at));
        heads.ahead.retain(|&(ahead, _)| ahead > seen);
        if head > seen && heads.ahead.back().is_none_or(|&(newest, _)| newest < head) {
            if heads.ahead.len() == KEPT_HEADS {
                heads.ahead.pop_back();
            }
            heads.ahead.push_back((head, at));
        }
    }

    /// The lag of a cache that has seen `seen`, at `now`; `None` before the
    /// first probe answered.
    pub(crate) fn lag(&self, seen: Revision, now: Instant) -> Option<CacheLag> {
        let heads = self.heads.lock();
        let (head, probed) = heads.last?;
        let behind_since = heads
            .ahead
            .iter()
            .find(|&&(ahead, _)| ahead > seen)
            .map(|&(_, at)| at);
        Some(CacheLag {
            head,
            revisions: head.get().saturating_sub(seen.get()),
            behind_for: behind_since.map_or(Duration::ZERO, |at| now.saturating_duration_since(at)),
            probed,
        })
    }
}

/// Asks `source` for its head now and then every `period` until `cancel`
/// (or for good once the source says it cannot tell), recording each answer
/// against the cache's revision from `seen`.
pub(super) async fn probe<S: Source + ?Sized>(
    source: &S,
    staleness: &Staleness,
    seen: impl Fn() -> Revision,
    period: Duration,
    cancel: &CancellationToken,
) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let answer = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            answer = tokio::time::timeout(period.min(PROBE_TIMEOUT), source.head()) => answer,
        };
        let answered = Instant::now();
        match answer {
            Ok(Ok(Some(head))) => staleness.observe(head, answered, seen()),
            Ok(Ok(None)) => return,
            Ok(Err(error)) => tracing::debug!(%error, "asking the source for its head failed"),
            Err(_) => tracing::debug!("asking the source for its head timed out"),
        }
        let Some(due) = answered.checked_add(crate::time::jittered(period, fastrand::f64())) else {
            return;
        };
        next = due;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn the_lag_counts_from_the_first_head_not_reached() {
        let staleness = Staleness::default();
        let start = Instant::now();
        assert_eq!(staleness.lag(Revision::ZERO, start), None, "not probed yet");
        staleness.observe(Revision::new(5), start, Revision::new(5));
        let lag = staleness.lag(Revision::new(5), start + SECOND).unwrap();
        assert_eq!((lag.revisions, lag.behind_for), (0, Duration::ZERO));

        staleness.observe(Revision::new(8), start + SECOND, Revision::new(5));
        staleness.observe(Revision::new(9), start + 2 * SECOND, Revision::new(6));
        let lag = staleness.lag(Revision::new(6), start + 3 * SECOND).unwrap();
        assert_eq!(
            (lag.head, lag.revisions, lag.behind_for),
            (Revision::new(9), 3, 2 * SECOND)
        );
        // Past 8: behind only 9, seen a second later.
        let lag = staleness.lag(Revision::new(8), start + 3 * SECOND).unwrap();
        assert_eq!((lag.revisions, lag.behind_for), (1, SECOND));
        let lag = staleness.lag(Revision::new(9), start + 3 * SECOND).unwrap();
        assert_eq!(
            (lag.revisions, lag.behind_for),
            (0, Duration::ZERO),
            "current at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_lag_keeps_its_oldest_and_newest_heads() {
        let staleness = Staleness::default();
        let start = Instant::now();
        for n in 1..=1000_u32 {
            staleness.observe(
                Revision::new(u64::from(n)),
                start + SECOND * n,
                Revision::ZERO,
            );
        }
        assert_eq!(staleness.heads.lock().ahead.len(), KEPT_HEADS);
        let now = start + SECOND * 1000;
        let lag = staleness.lag(Revision::ZERO, now).unwrap();
        assert_eq!((lag.revisions, lag.behind_for), (1000, SECOND * 999));
        let lag = staleness.lag(Revision::new(999), now).unwrap();
        assert_eq!(
            (lag.revisions, lag.behind_for),
            (1, Duration::ZERO),
            "seen at `now`"
        );
        // A head below what the cache has seen (probe and watch raced).
        staleness.observe(Revision::new(3), now, Revision::new(1000));
        assert_eq!(
            staleness.lag(Revision::new(1000), now).unwrap().revisions,
            0
        );
    }
}
