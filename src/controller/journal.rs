//! [`Journal`]: a controller's last reconciles and last failures, for the
//! status page and for anyone asking "what is it doing right now".

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Outcome, Triggers};

/// One reconcile, as a [`Journal`] keeps it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Reconciled<K> {
    /// The key reconciled.
    pub key: K,
    /// Why it ran.
    pub triggers: Triggers,
    /// Its attempt (1 unless earlier ones failed).
    pub attempt: u32,
    /// How long it waited before it started, from what woke it (see
    /// [`ControllerObserver::reconcile_latency`](super::ControllerObserver::reconcile_latency)).
    pub waited: Duration,
    /// When the worker took the key.
    pub started: Instant,
    /// How long it took, from then.
    pub took: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it failed: the error's `Display`, the panic's message, or the
    /// timeout; `None` for a success or a cancelled reconcile.
    pub failure: Option<Arc<str>>,
}

/// A controller's recent reconciles, newest last: the last
/// [`RECONCILES`](Self::RECONCILES), and apart from them the last
/// [`FAILURES`](Self::FAILURES) that failed, with their messages. Also counts every
/// reconcile, failure and retry since the controller was built.
///
/// A cheap handle: clones share one journal. The workers write it at the
/// end of every reconcile, under a lock held only to push one entry.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use tend::controller::{Action, Context, Controller, Outcome, Reconciler};
/// # use tend::memory::MemoryStore;
/// # use tend::testing::Harness;
/// # use tend::{Informer, Revision};
/// # #[derive(Clone, Debug)] struct Light { room: String, version: Revision }
/// # tend::impl_object!(Light, key: room: String, version: version);
/// struct Flaky;
///
/// impl Reconciler<Light> for Flaky {
///     type Error = std::io::Error;
///
///     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, std::io::Error> {
///         if ctx.attempt() == 1 {
///             return Err(std::io::Error::other("bulb not answering"));
///         }
///         Ok(Action::Done)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let store = MemoryStore::new("lights");
/// # let informer = Informer::builder(store.clone()).build()?;
/// let controller = Controller::builder("lights", &informer, Flaky).build()?;
/// let journal = controller.journal();
/// # let mut harness = Harness::new();
/// # harness.informer(&informer);
/// # harness.controller(controller);
/// store.put(Light { room: "hall".into(), version: Revision::ZERO });
/// harness.settle(Duration::from_secs(60)).await?;
///
/// let outcomes: Vec<_> = journal.reconciles().iter().map(|r| r.outcome).collect();
/// assert_eq!(outcomes, [Outcome::Error, Outcome::Success]);
/// let failure = &journal.failures()[0];
/// assert_eq!((failure.key.as_str(), failure.failure.as_deref()), ("hall", Some("bulb not answering")));
/// assert_eq!(journal.totals().retries, 1);
/// # harness.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Journal<K> {
    inner: Arc<Mutex<Entries<K>>>,
}

impl<K> Journal<K> {
    /// How many reconciles a journal keeps.
    pub const RECONCILES: usize = 32;
    /// How many failures a journal keeps, apart from the reconciles (so
    /// that a run of successes does not push the last error out of sight).
    pub const FAILURES: usize = 16;
}

impl<K> Clone for Journal<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> Default for Journal<K> {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Entries {
                reconciles: Vec::with_capacity(Self::RECONCILES),
                oldest: 0,
                failures: VecDeque::new(),
                totals: JournalTotals::default(),
            })),
        }
    }
}

/// What a [`Journal`] counted since its controller was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalTotals {
    /// Reconciles that ended (cancelled ones too).
    pub reconciles: u64,
    /// Those that failed: errors, panics and timeouts.
    pub failures: u64,
    /// Those that were a retry (attempt 2 or later).
    pub retries: u64,
}

#[derive(Debug)]
struct Entries<K> {
    /// A ring once full: overwritten in place from `oldest` on.
    reconciles: Vec<Reconciled<K>>,
    /// Where the oldest entry is (0 until full).
    oldest: usize,
    failures: VecDeque<Reconciled<K>>,
    totals: JournalTotals,
}

impl<K: Clone> Journal<K> {
    /// The last reconciles, oldest first.
    #[must_use]
    pub fn reconciles(&self) -> Vec<Reconciled<K>> {
        let entries = self.inner.lock();
        let (newer, older) = entries.reconciles.split_at(entries.oldest);
        older.iter().chain(newer).cloned().collect()
    }

    /// The last failed reconciles, oldest first.
    #[must_use]
    pub fn failures(&self) -> Vec<Reconciled<K>> {
        self.inner.lock().failures.iter().cloned().collect()
    }

    /// The counts since the controller was built.
    #[must_use]
    pub fn totals(&self) -> JournalTotals {
        self.inner.lock().totals
    }

    /// Records a reconcile of `key` that ended. Once full, the oldest
    /// entry is overwritten where it is, its key with `clone_from`: a `String`
    /// or [`ObjectKey`](crate::ObjectKey) key then reuses the old key's
    /// buffers, so a warm journal allocates nothing per reconcile.
    pub(super) fn record(&self, key: &K, facts: Facts) {
        let mut evicted_failure = None;
        let mut entries = self.inner.lock();
        let totals = &mut entries.totals;
        totals.reconciles = totals.reconciles.saturating_add(1);
        totals.retries = totals.retries.saturating_add(u64::from(facts.attempt > 1));
        if facts.failure.is_some() {
            totals.failures = totals.failures.saturating_add(1);
            if entries.failures.len() == Self::FAILURES {
                evicted_failure = entries.failures.pop_front();
            }
            let failure = Reconciled::of(key.clone(), facts.clone());
            entries.failures.push_back(failure);
        }
        let oldest = entries.oldest;
        if entries.reconciles.len() == Self::RECONCILES
            && let Some(entry) = entries.reconciles.get_mut(oldest)
        {
            entry.key.clone_from(key);
            entry.set(facts);
            entries.oldest = (oldest + 1) % Self::RECONCILES;
        } else {
            entries.reconciles.push(Reconciled::of(key.clone(), facts));
        }
        drop(entries);
        drop(evicted_failure);
    }
}

/// A reconcile's entry without its key, as the worker hands it over.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    pub(super) triggers: Triggers,
    pub(super) attempt: u32,
    pub(super) waited: Duration,
    pub(super) started: Instant,
    pub(super) took: Duration,
    pub(super) outcome: Outcome,
    pub(super) failure: Option<Arc<str>>,
}

impl<K> Reconciled<K> {
    fn of(key: K, facts: Facts) -> Self {
        let Facts {
            triggers,
            attempt,
            waited,
            started,
            took,
            outcome,
            failure,
        } = facts;
        Self {
            key,
            triggers,
            attempt,
            waited,
            started,
            took,
            outcome,
            failure,
        }
    }

    /// Overwrites everything but the key.
    fn set(&mut self, facts: Facts) {
        let Facts {
            triggers,
            attempt,
            waited,
            started,
            took,
            outcome,
            failure,
        } = facts;
        (self.triggers, self.attempt, self.waited) = (triggers, attempt, waited);
        (self.started, self.took, self.outcome) = (started, took, outcome);
        self.failure = failure;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Trigger;

    fn record(journal: &Journal<String>, n: usize, failure: Option<&str>) {
        let facts = Facts {
            triggers: Trigger::Changed.into(),
            attempt: if failure.is_some() { 2 } else { 1 },
            waited: Duration::ZERO,
            started: Instant::now(),
            took: Duration::from_millis(1),
            outcome: if failure.is_some() {
                Outcome::Error
            } else {
                Outcome::Success
            },
            failure: failure.map(Arc::from),
        };
        journal.record(&format!("key-{n}"), facts);
    }

    #[test]
    fn keeps_the_last_reconciles_and_the_last_failures_apart() {
        let journal = Journal::default();
        record(&journal, 0, Some("first failure"));
        for n in 1..=100 {
            record(&journal, n, None);
        }
        let reconciles = journal.reconciles();
        assert_eq!(reconciles.len(), Journal::<String>::RECONCILES);
        assert_eq!(
            reconciles[0].key,
            format!("key-{}", 101 - Journal::<String>::RECONCILES)
        );
        assert_eq!(reconciles.last().map(|r| r.key.as_str()), Some("key-100"));
        let keys: Vec<_> = reconciles.iter().map(|r| r.key.clone()).collect();
        let newest: Vec<_> = (69..=100).map(|n| format!("key-{n}")).collect();
        assert_eq!(keys, newest, "oldest first, across the ring's wrap");
        assert!(
            reconciles
                .iter()
                .all(|r| r.failure.is_none() && r.attempt == 1),
            "an overwritten entry keeps nothing of the one before"
        );
        let failures = journal.failures();
        assert_eq!(failures.len(), 1, "successes do not push a failure out");
        assert_eq!(failures[0].failure.as_deref(), Some("first failure"));
        let totals = journal.totals();
        assert_eq!(
            (totals.reconciles, totals.failures, totals.retries),
            (101, 1, 1)
        );
    }

    #[test]
    fn keeps_only_the_last_failures() {
        let journal = Journal::default();
        for n in 0..Journal::<String>::FAILURES + 5 {
            record(&journal, n, Some("failed"));
        }
        let failures = journal.failures();
        assert_eq!(failures.len(), Journal::<String>::FAILURES);
        assert_eq!(failures[0].key, "key-5");
    }
}
