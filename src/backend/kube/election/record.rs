//! The election record in a Lease's spec, as client-go's `LeaseLock` keeps
//! it: who holds it, for how long, since when, and how often it changed
//! hands; and when a candidate may take it. Pure: no requests, the clock
//! passed in.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// The version of the Lease a candidate saw, and when it first saw it on
/// its own monotonic clock. Expiry is measured from that instant, never
/// from the Lease's `renewTime` (another machine's wall clock): as
/// client-go does, this tolerates any clock skew between candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backend::kube) struct Observed {
    version: Option<String>,
    at: Instant,
}

impl Observed {
    /// What a candidate knows after reading `lease` at `now`: the time of
    /// the previous observation when the version is unchanged, else `now`.
    pub(in crate::backend::kube) fn after(
        previous: Option<Self>,
        lease: &Lease,
        now: Instant,
    ) -> Self {
        let version = lease.metadata.resource_version.clone();
        match previous {
            // A version older than the one observed (a cache behind a live
            // read) keeps the observation: only a newer one restarts it.
            Some(previous) if previous.version == version || older(&version, &previous.version) => {
                previous
            }
            _ => Self { version, at: now },
        }
    }

    /// When the version was first seen.
    pub(in crate::backend::kube) fn at(&self) -> Instant {
        self.at
    }
}

/// Whether `version` is numerically older than `than` (versions that are
/// not numbers are never older).
fn older(version: &Option<String>, than: &Option<String>) -> bool {
    let number = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<u64>().ok());
    matches!((number(version), number(than)), (Some(v), Some(t)) if v < t)
}

/// Whether a candidate may write itself into a Lease it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backend::kube) enum Verdict {
    /// Free (no holder), expired, or already this candidate's.
    Take,
    /// Another candidate holds it, until at least `until` (local clock).
    Held {
        /// The holder's identity.
        holder: String,
        /// When the holder's lease expires for this candidate, if it is
        /// not renewed before.
        until: Instant,
    },
}

/// The holder of a record; `None` when it has none (never held, or
/// released).
pub(in crate::backend::kube) fn holder(spec: Option<&LeaseSpec>) -> Option<&str> {
    spec.and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty())
}

/// Whether `identity` may take the Lease whose spec is `spec`, observed
/// unchanged since `observed` and read again at `now`.
pub(in crate::backend::kube) fn verdict(
    spec: Option<&LeaseSpec>,
    identity: &str,
    observed: &Observed,
    now: Instant,
) -> Verdict {
    let Some(holder) = holder(spec).filter(|holder| *holder != identity) else {
        return Verdict::Take;
    };
    let seconds = spec.and_then(|spec| spec.lease_duration_seconds);
    // A missing or negative duration holds for nothing, as in client-go.
    let duration = Duration::from_secs(seconds.map_or(0, |s| u64::try_from(s).unwrap_or(0)));
    let until = crate::time::deadline(observed.at, duration);
    if now < until {
        Verdict::Held {
            holder: holder.to_owned(),
            until,
        }
    } else {
        Verdict::Take
    }
}

/// The spec with which `identity` takes (or renews) a Lease whose spec
/// was `old`, at wall time `now`: holder, duration and renew time set; the
/// acquire time and transition count kept on a renewal, reset and bumped
/// on a change of holder. Other fields (`strategy`, `preferredHolder`) are
/// kept.
pub(super) fn claimed(
    old: Option<&LeaseSpec>,
    identity: &str,
    lease_seconds: i32,
    now: Timestamp,
) -> LeaseSpec {
    let mut spec = old.cloned().unwrap_or_default();
    let renewal = holder(old) == Some(identity);
    if !renewal {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(match old {
            // The first holder of a new Lease is no transition.
            None => 0,
            Some(old) => old.lease_transitions.unwrap_or(0).saturating_add(1),
        });
    } else if spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.holder_identity = Some(identity.to_owned());
    spec.lease_duration_seconds = Some(lease_seconds);
    spec.renew_time = Some(MicroTime(now));
    spec
}

/// The spec of a released Lease, as client-go's `ReleaseOnCancel` writes
/// it: no holder, a duration of 1 s, the transition count kept, so the
/// next candidate takes it at once.
pub(super) fn released(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..old.clone()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn lease(version: &str, holder: Option<&str>, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(seconds),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_expires_a_lease_duration_after_it_was_first_seen_unchanged() {
        let start = Instant::now();
        let held = lease("7", Some("a"), 3);
        let observed = Observed::after(None, &held, start);
        tokio::time::advance(Duration::from_secs(2)).await;
        // Read again, unchanged: still measured from the first sighting.
        let observed = Observed::after(Some(observed), &held, Instant::now());
        let verdict = verdict(held.spec.as_ref(), "b", &observed, Instant::now());
        assert_eq!(
            verdict,
            Verdict::Held {
                holder: "a".to_owned(),
                until: start + Duration::from_secs(3),
            }
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let verdict = super::verdict(held.spec.as_ref(), "b", &observed, Instant::now());
        assert_eq!(verdict, Verdict::Take);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_restarts_the_expiry() {
        let start = Instant::now();
        let observed = Observed::after(None, &lease("7", Some("a"), 3), start);
        tokio::time::advance(Duration::from_secs(2)).await;
        let renewed = lease("8", Some("a"), 3);
        let observed = Observed::after(Some(observed), &renewed, Instant::now());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(matches!(
            verdict(renewed.spec.as_ref(), "b", &observed, Instant::now()),
            Verdict::Held { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_or_own_lease_is_taken_at_once() {
        let now = Instant::now();
        for (free, identity) in [
            (lease("1", None, 15), "b"),
            (lease("1", Some(""), 15), "b"),
            (lease("1", Some("a"), 15), "a"),
        ] {
            let observed = Observed::after(None, &free, now);
            assert_eq!(
                verdict(free.spec.as_ref(), identity, &observed, now),
                Verdict::Take
            );
        }
        let observed = Observed::after(None, &lease("1", None, 15), now);
        assert_eq!(verdict(None, "b", &observed, now), Verdict::Take);
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_or_negative_duration_holds_for_nothing() {
        let now = Instant::now();
        for seconds in [0, -5] {
            let held = lease("1", Some("a"), seconds);
            let observed = Observed::after(None, &held, now);
            assert_eq!(
                verdict(held.spec.as_ref(), "b", &observed, now),
                Verdict::Take
            );
        }
        let mut held = lease("1", Some("a"), 15);
        held.spec.as_mut().unwrap().lease_duration_seconds = None;
        let observed = Observed::after(None, &held, now);
        assert_eq!(
            verdict(held.spec.as_ref(), "b", &observed, now),
            Verdict::Take
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_longest_duration_does_not_overflow() {
        let now = Instant::now();
        let held = lease("1", Some("a"), i32::MAX);
        let observed = Observed::after(None, &held, now);
        assert!(matches!(
            verdict(held.spec.as_ref(), "b", &observed, now),
            Verdict::Held { .. }
        ));
    }

    #[test]
    fn a_change_of_holder_bumps_transitions_and_resets_acquire_time() {
        let (then, now) = (Timestamp::UNIX_EPOCH, Timestamp::now());
        let mut old = lease("1", Some("a"), 15).spec.unwrap();
        old.acquire_time = Some(MicroTime(then));
        let taken = claimed(Some(&old), "b", 10, now);
        assert_eq!(taken.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.renew_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_duration_seconds, Some(10));

        let renewed = claimed(Some(&old), "a", 10, now);
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.acquire_time, Some(MicroTime(then)));
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));

        let first = claimed(None, "a", 10, now);
        assert_eq!(first.lease_transitions, Some(0));
        assert_eq!(first.acquire_time, Some(MicroTime(now)));
    }

    #[test]
    fn taking_a_released_lease_is_a_transition_and_the_count_saturates() {
        let now = Timestamp::now();
        let mut old = released(&lease("1", Some("a"), 15).spec.unwrap(), now);
        assert_eq!(holder(Some(&old)), None);
        assert_eq!(old.lease_duration_seconds, Some(1));
        assert_eq!(claimed(Some(&old), "a", 10, now).lease_transitions, Some(4));
        old.lease_transitions = Some(i32::MAX);
        assert_eq!(
            claimed(Some(&old), "b", 10, now).lease_transitions,
            Some(i32::MAX)
        );
    }
}
