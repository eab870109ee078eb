//! `KubeElection`: leader election on a `coordination.k8s.io/v1` Lease,
//! with client-go's semantics and tend's local deadline.
//!
//! `record.rs` is the election record in the Lease's spec and when a
//! candidate may take it (pure); `lock.rs` reads and writes the Lease with
//! `resourceVersion` preconditions; `campaign.rs` polls until this
//! candidate takes it; `renew.rs` keeps it while leading; `fencing.rs`
//! answers whether a token is current.

mod campaign;
mod fencing;
mod lock;
pub(super) mod record;
mod renew;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use async_trait::async_trait;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::task::AbortOnDropHandle;

use self::fencing::LeaseFencing;
use self::lock::LeaseLock;
use super::names;
use crate::client::FencingToken;
use crate::client::{Fences, Fencing};
use crate::election::{ElectionConfig, ElectionError, LeaderElector};
use crate::error::BoxError;

/// Where this candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Campaigning,
    Leading(FencingToken),
    Lost,
}

/// The candidacy's state, published to `lost`, the renewals and the
/// fencing handles.
#[derive(Debug, Clone, Copy)]
struct Term {
    phase: Phase,
    /// When the request of the last successful take or renewal was sent.
    renewed: Instant,
}

impl Term {
    /// The local deadline: the last successful renewal's send time plus
    /// the renew deadline, on this process's monotonic clock.
    fn deadline(&self, config: &ElectionConfig) -> Instant {
        crate::time::deadline(self.renewed, config.renew_deadline())
    }

    /// The token while leading and before the local deadline.
    fn token(&self, config: &ElectionConfig) -> Option<FencingToken> {
        match self.phase {
            Phase::Leading(token) if Instant::now() < self.deadline(config) => Some(token),
            _ => None,
        }
    }
}

/// A candidate in a leader election held in a Kubernetes `Lease`
/// (`coordination.k8s.io/v1`); implements the manager's
/// [`LeaderElector`]. Clones share one candidacy.
///
/// # How it works
///
/// As client-go's `leaderelection` with a `LeaseLock`: the Lease's spec
/// holds the record — `holderIdentity`, `leaseDurationSeconds`,
/// `acquireTime`, `renewTime`, `leaseTransitions` — and every write to it
/// is a replace conditional on the `resourceVersion` just read, so of two
/// candidates writing at once one gets a `409` and reads again.
///
/// - [`campaign`](LeaderElector::campaign) reads the Lease every
///   [`retry_period`](ElectionConfig::retry_period) (±10 % jitter) and
///   takes it when it is missing (created), has no holder (released), is
///   already this candidate's, or has *expired*: unchanged (same
///   `resourceVersion`) for its `leaseDurationSeconds` since this
///   candidate first saw that version, on its own monotonic clock. The
///   Lease's `renewTime`, another machine's wall clock, is never compared,
///   so clock skew between candidates does not matter (their clock *rates*
///   must agree, as in client-go).
/// - The leader renews every retry period from a background task,
///   writing `renewTime` over the version it last wrote.
/// - **Local deadline**: the leader gives up on its own when it has not
///   renewed successfully for [`renew_deadline`](ElectionConfig::renew_deadline),
///   measured from the time it *sent* its last successful renewal. From
///   that instant [`lost`](LeaderElector::lost) resolves,
///   [`token`](Self::token) is `None` and its [`Fences`] check says no
///   token is current. Another candidate first saw that renewal's version after it
///   was sent, and waits a whole lease duration from then, which is longer
///   than the renew deadline ([`ElectionConfig`] refuses anything else): so
///   the leader stops strictly before the Lease can expire for anyone
///   else.
/// - A renewal that finds the Lease held by someone else or deleted ends
///   the leadership at once. (A deleted Lease can be re-created by another
///   candidate at once, so the old leader may overlap it by up to a retry
///   period: do not delete a live election's Lease.)
/// - [`resign`](LeaderElector::resign) stops renewing and releases the
///   Lease as client-go's `ReleaseOnCancel` does (no holder, a duration of
///   1 s), so the next candidate takes it at its next poll. Dropping the
///   last handle, or a pending campaign, stops the renewals without
///   releasing: the Lease expires after its duration, as after a crash.
///
/// # Fencing token
///
/// The token is the Lease's `resourceVersion` as the acquiring write
/// stored it (a renewal keeps the token). The API server assigns it from
/// etcd's revision, which grows with every write to every object and never
/// goes back, also when the Lease is deleted and created again. Every
/// change of leader is a write over the previous one, so the token grows
/// with it. `leaseTransitions` would not do: it starts again at 0 when the
/// Lease is re-created, and anyone who can write the Lease can set it.
///
/// Kubernetes cannot make another write conditional on a Lease: the
/// token is checked locally by the candidate's [`Fences`] check, see the
/// [module docs](super#fencing-the-local-deadline-is-the-guarantee).
///
/// # Identities
///
/// The identity is the lock: two live candidates with one identity both
/// lead. The default, `{HOSTNAME or pid-N}-{random}`, is unique per
/// candidate. A candidate restarted with the identity the Lease names
/// takes it at once, as in client-go.
///
/// # Examples
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::kube::{KubeSource, KubeElection};
/// use tend::election::{ElectionConfig, LeaderElector};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let election = KubeElection::builder(client.clone(), "operators", "my-operator")
///     .identity(std::env::var("POD_NAME")?)
///     .config(ElectionConfig::default())
///     .build()?;
/// let maps = KubeSource::<ConfigMap>::namespaced(client, "apps");
/// let writes = maps.client_fenced_by(&election);
/// let token = election.campaign().await?;
/// // Refused with `ClientError::Fenced` from the local deadline on.
/// let writes = writes.fenced(token);
/// election.lost().await;
/// # drop(writes); Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubeElection {
    inner: Arc<Inner>,
}

struct Inner {
    lock: LeaseLock,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
    /// The renewals of the current leadership; dropping it stops them.
    keeper: Mutex<Option<AbortOnDropHandle<()>>>,
    /// Whether the Lease may name this candidate (it led since it last
    /// released): only then does `resign` write.
    claimed: AtomicBool,
}

/// Configures a [`KubeElection`]; from [`KubeElection::builder`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tend::election::ElectionConfig;
/// use tend::kube::{ElectionBuildError, KubeElection};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let secs = Duration::from_secs;
/// let election = KubeElection::builder(client.clone(), "shop", "shop-operator") // the Lease
///     .identity(std::env::var("POD_NAME")?) // unique among the candidates
///     .config(ElectionConfig::new(secs(6), secs(4), secs(1))?)
///     .build()?;
/// # drop(election);
/// let refused = KubeElection::builder(client, "shop", "Shop_Operator").build();
/// assert!(matches!(refused, Err(ElectionBuildError::InvalidName { .. }))); // not a DNS name
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct KubeElectionBuilder {
    client: Client,
    namespace: String,
    name: String,
    identity: Option<String>,
    config: ElectionConfig,
    labels: BTreeMap<String, String>,
}

impl fmt::Debug for KubeElectionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeElectionBuilder")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why a [`KubeElection`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionBuildError {
    /// The Lease's name is not a DNS subdomain name (RFC 1123: at most 253
    /// lower-case letters, digits, `-` and `.`).
    #[error("lease name `{name}` is not a valid Kubernetes object name")]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The namespace is not a DNS label (RFC 1123: at most 63 lower-case
    /// letters, digits and `-`).
    #[error("namespace `{namespace}` is not a valid Kubernetes namespace name")]
    InvalidNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// The identity is empty: an empty holder means a released Lease.
    #[error("candidate identity must not be empty")]
    EmptyIdentity,
}

impl KubeElectionBuilder {
    /// The identity written into the Lease's `holderIdentity` while this
    /// candidate leads, shown by [`KubeElection::leader`]; must be unique
    /// among live candidates (a pod's name is usual). Default:
    /// `{HOSTNAME or pid-N}-{8 random hex digits}`.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The timing (default: [`ElectionConfig::default`], client-go's
    /// 15 s / 10 s / 2 s). Its lease is the Lease's
    /// `leaseDurationSeconds`, rounded up to whole seconds.
    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }

    /// Labels of the Lease, set when this candidate creates it.
    pub(in crate::backend::kube) fn labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// The candidate, not campaigning yet.
    ///
    /// # Errors
    ///
    /// [`ElectionBuildError`] when the name, namespace or identity is
    /// one the API server would refuse.
    pub fn build(self) -> Result<KubeElection, ElectionBuildError> {
        if !names::is_subdomain(&self.name) {
            return Err(ElectionBuildError::InvalidName { name: self.name });
        }
        if !names::is_label(&self.namespace) {
            return Err(ElectionBuildError::InvalidNamespace {
                namespace: self.namespace,
            });
        }
        let identity = self.identity.unwrap_or_else(default_identity);
        if identity.is_empty() {
            return Err(ElectionBuildError::EmptyIdentity);
        }
        let lock = LeaseLock {
            api: Api::namespaced(self.client, &self.namespace),
            name: self.name,
            namespace: self.namespace,
            identity,
            lease_seconds: self.config.lease_seconds(),
            labels: self.labels,
        };
        let term = Term {
            phase: Phase::Idle,
            renewed: Instant::now(),
        };
        Ok(KubeElection {
            inner: Arc::new(Inner {
                lock,
                config: self.config,
                term: Arc::new(watch::Sender::new(term)),
                keeper: Mutex::new(None),
                claimed: AtomicBool::new(false),
            }),
        })
    }
}

/// `{HOSTNAME or pid-N}-{random}`: unique per candidate, readable in
/// `kubectl get lease` (a pod's `HOSTNAME` is its name).
fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    format!("{host}-{:08x}", fastrand::u32(..))
}

impl fmt::Debug for KubeElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock = &self.inner.lock;
        f.debug_struct("KubeElection")
            .field("namespace", &lock.namespace)
            .field("name", &lock.name)
            .field("identity", &lock.identity)
            .field("phase", &self.inner.term.borrow().phase)
            .finish_non_exhaustive()
    }
}

impl KubeElection {
    /// Starts configuring a candidate of the election held in the Lease
    /// `name` in `namespace` (`name` is also the `name` label of
    /// `leader_election_master_status`). The Lease is created by the first
    /// candidate; it needs `get`, `create` and `update` on `leases` in
    /// `coordination.k8s.io`.
    pub fn builder(
        client: Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> KubeElectionBuilder {
        KubeElectionBuilder {
            client,
            namespace: namespace.into(),
            name: name.into(),
            identity: None,
            config: ElectionConfig::default(),
            labels: BTreeMap::new(),
        }
    }

    /// The timing in use.
    #[must_use]
    pub fn config(&self) -> ElectionConfig {
        self.inner.config
    }

    /// This candidate's identity (its `holderIdentity` while it leads).
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.inner.lock.identity
    }

    /// Whether this candidate leads now (and its local deadline has not
    /// passed).
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.token().is_some()
    }

    /// This candidate's fencing token while it leads (before its local
    /// deadline).
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        self.inner.term.borrow().token(&self.inner.config)
    }

    /// The holder the Lease names (`None` when it does not exist or has no
    /// holder). The holder may have stopped renewing: this reads the
    /// record, it does not wait for it to expire.
    ///
    /// # Errors
    ///
    /// [`ElectionError::Backend`] when the Lease cannot be read within the
    /// renew deadline.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn leader(&self) -> Result<Option<String>, ElectionError> {
        let lease = self
            .timed(self.inner.lock.get())
            .await
            .map_err(|error| self.backend(error))?;
        let spec = lease.as_ref().and_then(|lease| lease.spec.as_ref());
        Ok(record::holder(spec).map(str::to_owned))
    }

    fn backend(&self, error: impl Into<BoxError>) -> ElectionError {
        ElectionError::Backend {
            election: self.inner.lock.name.clone(),
            source: error.into(),
        }
    }

    /// `request`, failed as timed out after the renew deadline.
    async fn timed<T>(
        &self,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, RequestError> {
        match tokio::time::timeout(self.inner.config.renew_deadline(), request).await {
            Ok(result) => result.map_err(RequestError::Api),
            Err(_) => Err(RequestError::TimedOut),
        }
    }
}

/// Why a request about the Lease failed.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("request to the API server failed")]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within the renew deadline")]
    TimedOut,
    #[error("the Lease's resourceVersion is unusable as a fencing token")]
    Revision(#[from] super::RevisionError),
}

impl RequestError {
    /// Whether the API server refused for good (retrying will not help):
    /// a malformed request, no credentials, no permission, an invalid
    /// object; or a server whose versions are not numbers.
    fn is_refusal(&self) -> bool {
        match self {
            Self::Api(kube::Error::Api(status)) => matches!(status.code, 400 | 401 | 403 | 422),
            Self::Api(kube::Error::BuildRequest(_)) | Self::Revision(_) => true,
            Self::Api(_) | Self::TimedOut => false,
        }
    }
}

#[async_trait]
impl LeaderElector for KubeElection {
    fn name(&self) -> &str {
        &self.inner.lock.name
    }

    async fn campaign(&self) -> Result<FencingToken, ElectionError> {
        self.campaign_until_elected().await
    }

    async fn lost(&self) {
        let config = self.inner.config;
        let mut term = self.inner.term.subscribe();
        loop {
            let current = *term.borrow_and_update();
            let Phase::Leading(token) = current.phase else {
                return;
            };
            tokio::select! {
                () = sleep_until(current.deadline(&config)) => {
                    // A renewal may have moved the deadline as the timer
                    // fired: only an expired term is lost.
                    self.inner.term.send_if_modified(|term| {
                        let expired = term.phase == Phase::Leading(token)
                            && Instant::now() >= term.deadline(&config);
                        if expired {
                            term.phase = Phase::Lost;
                        }
                        expired
                    });
                }
                changed = term.changed() => if changed.is_err() {
                    return;
                },
            }
        }
    }

    async fn resign(&self) -> Result<(), ElectionError> {
        self.release().await.map_err(|error| self.backend(error))
    }
}

/// The authority that says whether a token is current, for
/// [`KubeSource::client_fenced_by`](super::KubeSource::client_fenced_by).
/// It does not keep the candidacy alive: once every `KubeElection` handle
/// is dropped, no token is current after the local deadline.
impl Fences for KubeElection {
    fn fencing(&self) -> Arc<dyn Fencing> {
        Arc::new(LeaseFencing::new(
            Arc::clone(&self.inner.term),
            self.inner.config,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::Fencing;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// A candidate whose API server does not exist: the deadline logic
    /// runs without requests.
    fn offline() -> KubeElection {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let timing = ElectionConfig::new(MS(3000), MS(2000), MS(500)).unwrap();
        KubeElection::builder(client, "default", "test")
            .config(timing)
            .build()
            .unwrap()
    }

    fn lead(election: &KubeElection, token: FencingToken) {
        election.inner.term.send_replace(Term {
            phase: Phase::Leading(token),
            renewed: Instant::now(),
        });
    }

    /// Moves the paused clock and lets woken tasks run.
    async fn advance(by: Duration) {
        tokio::time::advance(by).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_is_deposed_at_its_local_deadline() {
        let election = offline();
        let fencing = election.fencing();
        lead(&election, FencingToken::new(7));
        assert!(
            fencing.is_current(FencingToken::new(7)) && !fencing.is_current(FencingToken::new(6))
        );
        let lost = tokio::spawn({
            let election = election.clone();
            async move { election.lost().await }
        });
        advance(MS(1999)).await;
        assert!(!lost.is_finished());
        assert_eq!(election.token(), Some(FencingToken::new(7)));
        advance(MS(1)).await;
        assert!(lost.is_finished(), "lost() did not resolve at the deadline");
        assert!(!fencing.is_current(FencingToken::new(7)));
        assert_eq!(election.token(), None);
        assert!(!election.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_moves_the_local_deadline() {
        let election = offline();
        lead(&election, FencingToken::new(7));
        let lost = tokio::spawn({
            let election = election.clone();
            async move { election.lost().await }
        });
        advance(MS(1500)).await;
        let renewed = Instant::now();
        election.inner.term.send_if_modified(|term| {
            term.renewed = renewed;
            false
        });
        advance(MS(1000)).await;
        assert!(!lost.is_finished(), "lost() resolved at the old deadline");
        assert!(election.fencing().is_current(FencingToken::new(7)));
        advance(MS(1000)).await;
        assert!(lost.is_finished());
        assert!(!election.fencing().is_current(FencingToken::new(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn fencing_outlives_the_election_but_not_its_deadline() {
        let election = offline();
        lead(&election, FencingToken::new(3));
        let fencing = election.fencing();
        drop(election);
        assert!(fencing.is_current(FencingToken::new(3)));
        advance(MS(2000)).await;
        assert!(!fencing.is_current(FencingToken::new(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_candidate_that_never_led_resigns_without_a_request_and_is_not_leading() {
        let election = offline();
        // No API server: a request would fail.
        election.resign().await.unwrap();
        tokio::time::timeout(MS(1), election.lost())
            .await
            .expect("lost() waits although this candidate does not lead");
        assert_eq!(election.token(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn resign_ends_the_leadership_at_once() {
        let election = offline();
        lead(&election, FencingToken::new(5));
        let lost = tokio::spawn({
            let election = election.clone();
            async move { election.lost().await }
        });
        advance(MS(1)).await;
        // Not claimed: no request is made.
        election.resign().await.unwrap();
        advance(MS(1)).await;
        assert!(lost.is_finished());
        assert!(!election.fencing().is_current(FencingToken::new(5)));
    }
}
