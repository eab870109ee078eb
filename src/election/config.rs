//! `ElectionConfig`: the timing of a lease-based election (etcd's lease,
//! a Kubernetes `Lease`), validated.

use std::time::Duration;

/// Why an [`ElectionConfig`] was refused.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::election::{ElectionConfig, ElectionConfigError};
///
/// let secs = Duration::from_secs;
/// let error = ElectionConfig::new(secs(15), secs(2), secs(2)).unwrap_err();
/// assert_eq!(error, ElectionConfigError::RenewDeadlineNotAboveRetry {
///     renew_deadline: secs(2),
///     retry_period: secs(2),
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionConfigError {
    /// The lease must outlast the renew deadline, so that a leader stops
    /// acting before its lease can expire on the server.
    #[error("lease {lease:?} must be longer than the renew deadline {renew_deadline:?}")]
    LeaseNotAboveRenewDeadline {
        /// The lease duration.
        lease: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// The renew deadline must exceed 1.2 × the retry period, so that a
    /// leader gets more than one chance to renew.
    #[error(
        "renew deadline {renew_deadline:?} must be longer than 1.2 × the retry period {retry_period:?}"
    )]
    RenewDeadlineNotAboveRetry {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
    /// The retry period must not be zero.
    #[error("retry period must not be zero")]
    ZeroRetryPeriod,
    /// The lease is longer than every backend can hold
    /// ([`ElectionConfig::MAX_LEASE`], 2³¹ − 1 s).
    #[error("lease {lease:?} exceeds the longest lease {max:?}")]
    LeaseTooLong {
        /// The lease duration.
        lease: Duration,
        /// The longest lease.
        max: Duration,
    },
}

/// How long a leadership lasts without renewal, and how often it is
/// renewed; the defaults are client-go's (15 s, 10 s, 2 s). The same
/// configuration serves every lease-based elector: the etcd backend's
/// `EtcdElection` and the Kubernetes backend's `KubeElection`.
///
/// - `lease`: the lease's duration, rounded up to whole seconds (the unit
///   of an etcd lease's TTL and of a Kubernetes `Lease`'s
///   `leaseDurationSeconds`). Another candidate wins about this long after
///   the leader stops renewing (on etcd, plus its expiry check of about
///   half a second; on Kubernetes, plus up to two retry periods, the
///   candidates' polling).
/// - `renew_deadline`: the leader gives up on its own when it has not
///   renewed for this long (measured on its monotonic clock from the last
///   successful renewal's request), before the lease can expire.
/// - `retry_period`: how often the lease is renewed, and how long a failed
///   campaign waits before trying again.
///
/// Valid when `MAX_LEASE ≥ lease > renew_deadline > 1.2 × retry_period > 0`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::election::{ElectionConfig, ElectionConfigError};
///
/// let secs = Duration::from_secs;
/// // A faster failover than the default: a standby wins about 6 s after
/// // the leader stopped renewing.
/// let fast = ElectionConfig::new(secs(6), secs(4), secs(1))?;
/// assert_eq!((fast.lease(), fast.renew_deadline()), (secs(6), secs(4)));
/// assert_eq!(ElectionConfig::default().lease(), secs(15));
///
/// let wrong = ElectionConfig::new(secs(4), secs(4), secs(1)); // lease not above the deadline
/// assert!(matches!(wrong, Err(ElectionConfigError::LeaseNotAboveRenewDeadline { .. })));
/// # Ok::<(), ElectionConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionConfig {
    lease: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionConfig {
    /// The longest lease, 2³¹ − 1 s (about 68 years): a Kubernetes
    /// `Lease`'s `leaseDurationSeconds` is a 32-bit integer (etcd's limit,
    /// 9,000,000,000 s, is higher). Its whole seconds must not exceed this.
    pub const MAX_LEASE: Duration = Duration::from_secs(i32::MAX as u64);

    /// A validated configuration.
    ///
    /// # Errors
    ///
    /// [`ElectionConfigError`] unless
    /// `MAX_LEASE ≥ lease > renew_deadline > 1.2 × retry_period > 0`.
    pub fn new(
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, ElectionConfigError> {
        if retry_period.is_zero() {
            return Err(ElectionConfigError::ZeroRetryPeriod);
        }
        if lease > Self::MAX_LEASE {
            return Err(ElectionConfigError::LeaseTooLong {
                lease,
                max: Self::MAX_LEASE,
            });
        }
        if lease <= renew_deadline {
            return Err(ElectionConfigError::LeaseNotAboveRenewDeadline {
                lease,
                renew_deadline,
            });
        }
        // renew_deadline <= 1.2 × retry_period, exactly and without overflow.
        if renew_deadline.saturating_mul(5) <= retry_period.saturating_mul(6) {
            return Err(ElectionConfigError::RenewDeadlineNotAboveRetry {
                renew_deadline,
                retry_period,
            });
        }
        Ok(Self {
            lease,
            renew_deadline,
            retry_period,
        })
    }

    /// The lease duration.
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The renew deadline.
    #[must_use]
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The retry period.
    #[must_use]
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    /// The lease in whole seconds, rounded up (at least 1; at most
    /// `i32::MAX`, since the lease is at most [`MAX_LEASE`](Self::MAX_LEASE)).
    #[cfg(any(feature = "kube", feature = "etcd", test))]
    pub(crate) fn lease_seconds(&self) -> i32 {
        let seconds = self.lease.as_secs() + u64::from(self.lease.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn defaults_are_valid_and_client_go_s() {
        let config = ElectionConfig::default();
        assert_eq!(ElectionConfig::new(S(15), S(10), S(2)), Ok(config));
        assert_eq!(config.lease_seconds(), 15);
    }

    #[test]
    fn invalid_timings_are_refused() {
        assert!(matches!(
            ElectionConfig::new(S(10), S(10), S(2)),
            Err(ElectionConfigError::LeaseNotAboveRenewDeadline { .. })
        ));
        assert!(matches!(
            ElectionConfig::new(S(15), S(12), S(10)),
            Err(ElectionConfigError::RenewDeadlineNotAboveRetry { .. })
        ));
        assert!(matches!(
            ElectionConfig::new(S(15), S(10), Duration::ZERO),
            Err(ElectionConfigError::ZeroRetryPeriod)
        ));
        assert!(matches!(
            ElectionConfig::new(Duration::MAX, S(10), S(2)),
            Err(ElectionConfigError::LeaseTooLong { .. })
        ));
        assert!(matches!(
            ElectionConfig::new(
                ElectionConfig::MAX_LEASE + Duration::from_nanos(1),
                S(10),
                S(2)
            ),
            Err(ElectionConfigError::LeaseTooLong { .. })
        ));
    }

    #[test]
    fn a_retry_period_too_long_to_scale_is_refused_not_a_panic() {
        assert!(matches!(
            ElectionConfig::new(S(15), S(10), Duration::MAX),
            Err(ElectionConfigError::RenewDeadlineNotAboveRetry { .. })
        ));
    }

    #[test]
    fn the_longest_lease_fits_a_kubernetes_lease() {
        let config = ElectionConfig::new(
            ElectionConfig::MAX_LEASE,
            ElectionConfig::MAX_LEASE - S(1),
            S(2),
        )
        .unwrap();
        assert_eq!(config.lease_seconds(), i32::MAX);
    }

    #[test]
    fn lease_rounds_up_to_whole_seconds() {
        let config = ElectionConfig::new(
            Duration::from_millis(1500),
            S(1),
            Duration::from_millis(500),
        )
        .unwrap();
        assert_eq!(config.lease_seconds(), 2);
    }
}
