//! `/healthz`'s stall checks: a key held far longer than its controller's
//! reconcile timeout allows, an informer whose source has kept failing.
//!
//! Both are pure functions of a snapshot and the time, so paused-clock tests
//! drive them; `status.rs` gathers the snapshots.
//!
//! A worker cancels a reconcile at its timeout, so a key still held at a
//! multiple of it means the worker itself is wedged (a reconcile blocking
//! its thread, a destructor that hangs): the process will not recover by
//! itself, and a restart by the supervisor is the answer. Likewise an
//! informer whose source has failed for a long time while other replicas
//! may be fine (a dead connection pool, stale credentials or DNS).

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::erased::Held;
use crate::informer::InformerStats;

/// When `/healthz` calls a key stuck or an informer stalled; `None` turns a
/// rule off. Set through the [`ManagerBuilder`](super::ManagerBuilder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StallLimits {
    /// Stuck: held longer than this many reconcile timeouts.
    pub(super) timeouts: Option<NonZeroU32>,
    /// Stuck: held longer than this, whatever the timeout.
    pub(super) held: Option<Duration>,
    /// Stalled: the source has failed for this long without a success.
    pub(super) informer: Option<Duration>,
}

impl StallLimits {
    /// Three timeouts: the worker cancels at one, so two more are slack for
    /// a busy runtime or synchronous work before the reconcile's first
    /// `.await` (its timer starts after that). Fifteen minutes of failures:
    /// well past a control-plane upgrade or a failover of the source (the
    /// informer retries at least every 30 s meanwhile).
    pub(super) const DEFAULT: Self = Self {
        timeouts: NonZeroU32::new(3),
        held: None,
        informer: Some(Duration::from_secs(15 * 60)),
    };

    /// Every rule off: `/healthz` reports only failed tasks.
    pub(super) const OFF: Self = Self {
        timeouts: None,
        held: None,
        informer: None,
    };

    /// How long a controller with `reconcile_timeout` may hold a key before
    /// it is stuck: the shorter of the two rules; `None` when neither
    /// applies (or the multiple overflows: never, in practice).
    pub(super) fn key_bound(&self, reconcile_timeout: Option<Duration>) -> Option<Duration> {
        let relative = reconcile_timeout
            .zip(self.timeouts)
            .and_then(|(timeout, factor)| timeout.checked_mul(factor.get()));
        match (relative, self.held) {
            (Some(relative), Some(held)) => Some(relative.min(held)),
            (relative, held) => relative.or(held),
        }
    }

    /// Why the informer `name` is stalled at `now`, if it is: its source
    /// has been failing for longer than the bound.
    pub(super) fn informer_stall(
        &self,
        name: &str,
        stats: &InformerStats,
        now: Instant,
    ) -> Option<Unhealthy> {
        let bound = self.informer?;
        let failing = now.saturating_duration_since(stats.failing_since?);
        (failing > bound).then(|| Unhealthy::StalledInformer {
            informer: name.to_owned(),
            failing,
            since_progress: stats
                .last_progress
                .map(|at| now.saturating_duration_since(at)),
            bound,
        })
    }
}

/// Why the controller `name` is stuck, if it holds keys longer than `bound`.
pub(super) fn stuck_keys(
    name: &str,
    reconcile_timeout: Option<Duration>,
    bound: Duration,
    held: Held,
) -> Option<Unhealthy> {
    (held.count > 0).then(|| Unhealthy::StuckKeys {
        controller: name.to_owned(),
        reconcile_timeout,
        bound,
        held,
    })
}

/// One reason why `/healthz` fails; its `Display` is one line of the body.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Unhealthy {
    /// A task failed: the manager is stopping.
    Failed(String),
    /// A controller holds keys longer than `bound`.
    StuckKeys {
        controller: String,
        reconcile_timeout: Option<Duration>,
        bound: Duration,
        held: Held,
    },
    /// An informer's source has failed for `failing`, longer than `bound`.
    StalledInformer {
        informer: String,
        failing: Duration,
        since_progress: Option<Duration>,
        bound: Duration,
    },
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(failure) => write!(f, "failed: {failure}"),
            Self::StuckKeys {
                controller,
                reconcile_timeout,
                bound,
                held,
            } => {
                write!(
                    f,
                    "controller `{controller}` is stuck: {} held longer than {:?} (",
                    plural(held.count, "key"),
                    rounded(*bound),
                )?;
                match reconcile_timeout {
                    Some(timeout) => write!(f, "reconcile timeout {:?}", rounded(*timeout))?,
                    None => f.write_str("no reconcile timeout")?,
                }
                f.write_str("):")?;
                for (key, age) in &held.oldest {
                    write!(f, " `{}` for {:?};", one_line(key), rounded(*age))?;
                }
                match held.count - held.oldest.len() {
                    0 => Ok(()),
                    more => write!(f, " and {more} more;"),
                }
            }
            Self::StalledInformer {
                informer,
                failing,
                since_progress,
                bound,
            } => {
                write!(
                    f,
                    "informer `{informer}` is stalled: its source has been failing for {:?} (bound {:?}), ",
                    rounded(*failing),
                    rounded(*bound),
                )?;
                match since_progress {
                    Some(age) => write!(f, "last progress {:?} ago", rounded(*age)),
                    None => f.write_str("no progress since it started"),
                }
            }
        }
    }
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// `d` to the millisecond, so that `Debug` prints `1800s` or `1.5s`.
fn rounded(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `key` with its control characters escaped (`\n`, `\u{1b}` …), so that one
/// reason stays one line; everything else as written.
fn one_line(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn limits(timeouts: u32, held: Option<Duration>) -> StallLimits {
        StallLimits {
            timeouts: NonZeroU32::new(timeouts),
            held,
            informer: Some(10 * MINUTE),
        }
    }

    #[test]
    fn a_key_bound_is_the_shorter_of_the_multiple_and_the_absolute_bound() {
        let five = Some(5 * MINUTE);
        assert_eq!(limits(3, None).key_bound(five), Some(15 * MINUTE));
        assert_eq!(limits(3, Some(MINUTE)).key_bound(five), Some(MINUTE));
        assert_eq!(limits(3, Some(MINUTE)).key_bound(None), Some(MINUTE));
        assert_eq!(limits(0, Some(MINUTE)).key_bound(five), Some(MINUTE));
        assert_eq!(limits(3, None).key_bound(None), None);
        assert_eq!(StallLimits::OFF.key_bound(five), None);
    }

    #[test]
    fn huge_timeouts_and_factors_mean_never_without_overflow() {
        assert_eq!(limits(3, None).key_bound(Some(Duration::MAX)), None);
        assert_eq!(limits(u32::MAX, None).key_bound(Some(Duration::MAX)), None);
        assert_eq!(
            limits(u32::MAX, Some(Duration::MAX)).key_bound(Some(Duration::MAX)),
            Some(Duration::MAX)
        );
    }

    fn stats(failing_since: Option<Instant>, last_progress: Option<Instant>) -> InformerStats {
        InformerStats {
            failing_since,
            last_progress,
            ..InformerStats::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_informer_is_stalled_only_once_its_source_failed_longer_than_the_bound() {
        let start = Instant::now();
        let limits = limits(3, None);
        let failing = stats(Some(start), Some(start - MINUTE));
        let at = |elapsed| limits.informer_stall("pods", &failing, start + elapsed);
        assert_eq!(at(10 * MINUTE), None);
        assert_eq!(
            at(10 * MINUTE + Duration::from_millis(1)).map(|u| u.to_string()),
            Some(
                "informer `pods` is stalled: its source has been failing for 600.001s \
                 (bound 600s), last progress 660.001s ago"
                    .to_owned()
            )
        );
        let healthy = stats(None, Some(start - 60 * MINUTE));
        assert_eq!(limits.informer_stall("pods", &healthy, start), None);
        let never = stats(Some(start), None);
        assert_eq!(
            limits
                .informer_stall("pods", &never, start + 11 * MINUTE)
                .map(|u| u.to_string()),
            Some(
                "informer `pods` is stalled: its source has been failing for 660s \
                 (bound 600s), no progress since it started"
                    .to_owned()
            )
        );
        let unbounded = StallLimits {
            informer: Some(Duration::MAX),
            ..limits
        };
        assert_eq!(
            unbounded.informer_stall("pods", &failing, start + 1000 * MINUTE),
            None
        );
        assert_eq!(
            StallLimits::OFF.informer_stall("pods", &failing, start + 1000 * MINUTE),
            None
        );
    }

    #[test]
    fn a_stuck_controller_names_its_oldest_keys_on_one_line() {
        let held = Held {
            count: 3,
            oldest: vec![
                ("a\nb\"c".to_owned(), Duration::from_millis(1_800_400)),
                ("ünï".to_owned(), Duration::from_secs(901)),
            ],
        };
        let reason = stuck_keys("widgets", Some(5 * MINUTE), 15 * MINUTE, held).unwrap();
        assert_eq!(
            reason.to_string(),
            "controller `widgets` is stuck: 3 keys held longer than 900s (reconcile timeout \
             300s): `a\\nb\"c` for 1800.4s; `ünï` for 901s; and 1 more;"
        );
        let none = Held {
            count: 0,
            oldest: Vec::new(),
        };
        assert_eq!(stuck_keys("widgets", None, MINUTE, none), None);
    }
}
