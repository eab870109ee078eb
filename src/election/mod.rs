//! Leader election: the [`LeaderElector`] trait, its error, and the timing
//! of lease-based electors ([`ElectionConfig`]).
//!
//! The backends implement it: [`MemoryElection`](crate::memory::MemoryElection)
//! in one process, `tend::etcd::EtcdElection` and `tend::kube::KubeElection`
//! across replicas. The [`Manager`](crate::manager::Manager) and a
//! [`Leadership`](crate::placement::Leadership) run one.

mod config;

use async_trait::async_trait;

use crate::client::FencingToken;
use crate::error::BoxError;

pub use self::config::{ElectionConfig, ElectionConfigError};

/// Why a leader election call failed.
///
/// # Examples
///
/// An elector of your own reports its backend's failures so:
///
/// ```
/// use std::error::Error;
/// use tend::election::ElectionError;
///
/// let error = ElectionError::Backend {
///     election: "operator".into(),
///     source: std::io::Error::other("lock service unreachable").into(),
/// };
/// assert_eq!(error.to_string(), "leader election `operator` failed");
/// assert_eq!(error.source().unwrap().to_string(), "lock service unreachable");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// The election's backend (a lease store, a lock service) failed.
    #[error("leader election `{election}` failed")]
    Backend {
        /// The election's name.
        election: String,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
}

/// One candidate in a leader election.
///
/// A [`Manager`](crate::manager::Manager) with an elector runs its informers at once
/// (a warm standby: caches are filled before it wins, so failover is fast),
/// then calls [`campaign`](LeaderElector::campaign) and starts its
/// controllers only when that returns. From then on it waits on
/// [`lost`](LeaderElector::lost): when leadership is lost it stops
/// reconciling at once and [`Manager::run`](crate::manager::Manager::run) returns
/// [`ManagerError::LostLeadership`](crate::manager::ManagerError::LostLeadership).
/// Whenever it stops (a clean shutdown, a lost leadership, a failure) it
/// calls [`resign`](LeaderElector::resign) after its controllers have
/// stopped, bounded by 5 s, so that a standby takes over without waiting for
/// a lease to expire; `resign` must therefore be harmless when not leading.
///
/// # Fencing tokens
///
/// `campaign` returns a *fencing token*: an opaque value that grows with
/// every change of leader. Reconcilers read it from
/// [`Context::fencing_token`](crate::controller::Context::fencing_token) and
/// pass it to writes that check it, so that a deposed leader that has not
/// noticed yet (a long GC pause, a partition) cannot overwrite the new
/// leader's work.
///
/// # Implementing
///
/// Keep implementations small and cancel safe: the manager drops a pending
/// `campaign` when it shuts down during the campaign. The etcd backend
/// implements this trait over an etcd lease, the Kubernetes backend over a
/// `coordination.k8s.io/v1` `Lease`; both take their timing from an
/// [`ElectionConfig`].
///
/// # Examples
///
/// Code written against the trait, run here on the in-process election:
///
/// ```
/// use tend::election::{ElectionError, LeaderElector};
/// use tend::memory::MemoryElectionGroup;
///
/// /// Leads until the leadership is lost, then gives up the candidacy.
/// async fn lead(elector: &impl LeaderElector) -> Result<(), ElectionError> {
///     let token = elector.campaign().await?; // waits until this candidate leads
///     println!("{} leads with token {token}", elector.name());
///     elector.lost().await; // … act, fencing every write with `token` …
///     elector.resign().await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ElectionError> {
/// let election = MemoryElectionGroup::new("operator");
/// let candidate = election.candidate();
/// let (led, ()) = tokio::join!(lead(&candidate), async {
///     while election.leader_token().is_none() {
///         tokio::task::yield_now().await;
///     }
///     election.depose(); // as an expired lease
/// });
/// led?;
/// assert!(!candidate.is_leader());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LeaderElector: Send + Sync + 'static {
    /// The election's (lock's) name: the `name` label of
    /// `leader_election_master_status`.
    fn name(&self) -> &str;

    /// Campaigns until this candidate is the leader, then returns its
    /// fencing token (greater than any token returned before, to any
    /// candidate of this election).
    ///
    /// # Errors
    ///
    /// [`ElectionError`] when the backend fails; the manager then stops.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: dropping the future withdraws the candidacy.
    async fn campaign(&self) -> Result<FencingToken, ElectionError>;

    /// Resolves once the leadership won by the last
    /// [`campaign`](LeaderElector::campaign) is lost (at once if this
    /// candidate does not lead).
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe.
    async fn lost(&self);

    /// Gives up the leadership (or the candidacy), letting another candidate
    /// win at once.
    ///
    /// # Errors
    ///
    /// [`ElectionError`] when the backend fails; the leadership then ends
    /// when the backend's lease expires.
    ///
    /// # Cancel safety
    ///
    /// Should be cancel safe; a dropped call may leave the leadership in
    /// place until it expires.
    async fn resign(&self) -> Result<(), ElectionError>;
}
