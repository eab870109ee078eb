//! `EtcdElection`: leader election on an etcd lease, with fencing tokens.
//!
//! `lease.rs` makes the candidacy the holder of its lease (kept alive by
//! `etcd/lease.rs`); `campaign.rs` queues the
//! candidate and waits for its turn; `fence.rs` makes a write conditional on
//! the leadership.

mod campaign;
mod fence;
mod lease;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::task::AbortOnDropHandle;

use super::prefix_end;
use crate::client::FencingToken;
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

/// The candidacy's state, published to `lost` and the campaign.
#[derive(Debug, Clone, Copy)]
struct Term {
    phase: Phase,
    /// When the request of the last successful lease renewal was sent.
    renewed: Instant,
    /// False once the lease is known gone, or its renewal overdue.
    lease_alive: bool,
}

/// The key and lease of the current candidacy; dropping it stops the
/// lease's keep-alive task.
struct Candidacy {
    key: Vec<u8>,
    lease: i64,
    _keeper: AbortOnDropHandle<()>,
}

/// A candidate in a leader election held in etcd; implements the
/// manager's [`LeaderElector`]. Clones share one candidacy.
///
/// # How it works
///
/// [`campaign`](LeaderElector::campaign) grants a lease (TTL:
/// [`ElectionConfig::lease`]), keeps it alive every
/// [`retry_period`](ElectionConfig::retry_period) from a background task,
/// and creates the key `{prefix}{lease id in hex}` bound to it. Candidates
/// queue by their key's create revision: the oldest key leads, the others
/// each watch the key just older than theirs. The leader's **fencing token**
/// is its key's create revision, which grows with every new leader.
///
/// The leader gives up on its own at its *local deadline*: the send time of
/// its last successful renewal plus [`renew_deadline`](ElectionConfig::renew_deadline),
/// on the monotonic clock. Since the lease outlives the renew deadline, a
/// leader cut off from etcd stops acting before its lease can expire and
/// another candidate can win. [`lost`](LeaderElector::lost) resolves then,
/// or at once when etcd reports the lease gone. Each renewal while leading
/// also reads the leader's key back: when it is gone (deleted by hand, say
/// `etcdctl del --prefix`) or was re-created, the leadership is lost within
/// a retry period, and the lease is revoked. A candidate wins only if, in
/// one transaction, its own key still exists as created and no older key
/// is left.
///
/// Transient etcd failures during a campaign are logged and retried every
/// retry period; only a refused request (bad arguments, permissions) fails
/// the campaign.
///
/// [`resign`](LeaderElector::resign) revokes the lease (deleting the key),
/// so the next candidate wins at once. Dropping the last handle, or a
/// pending campaign, stops the renewals without revoking: the key lingers
/// until the lease expires, as after a crash.
///
/// # Examples
///
/// ```no_run
/// use tend::etcd::EtcdElection;
/// use tend::election::{ElectionConfig, LeaderElector};
///
/// # async fn run(client: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let election = EtcdElection::builder(client, "my-operator")
///     .identity("replica-1")
///     .config(ElectionConfig::default())
///     .build()?;
/// let token = election.campaign().await?;
/// println!("leading with token {token}");
/// election.lost().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdElection {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    identity: String,
    prefix: Vec<u8>,
    client: Client,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
    candidacy: Mutex<Option<Candidacy>>,
}

/// Configures an [`EtcdElection`]; from [`EtcdElection::builder`].
///
/// # Examples
///
/// Run here against a real etcd started by
/// [`EtcdServer`](crate::testing::etcd::EtcdServer):
///
/// ```
/// use std::time::Duration;
/// use tend::election::{ElectionConfig, LeaderElector};
/// use tend::etcd::{ElectionBuildError, EtcdElection};
///
/// # async fn run(etcd: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let secs = Duration::from_secs;
/// let config = ElectionConfig::new(secs(6), secs(4), secs(1))?;
/// let election = EtcdElection::builder(etcd.clone(), "shop-operator")
///     .identity("replica-1") // unique per candidate (a pod's name); see `EtcdElection::leader`
///     .prefix("/shop/leader/")
///     .config(config)
///     .build()?;
/// assert_eq!(election.config(), config);
/// election.campaign().await?; // the only candidate: it leads at once
/// assert_eq!(election.leader().await?.as_deref(), Some("replica-1"));
/// election.resign().await?;
///
/// let refused = EtcdElection::builder(etcd, "shop/operator").build();
/// assert!(matches!(refused, Err(ElectionBuildError::InvalidName { .. })));
/// # Ok(()) }
/// # #[tokio::main] async fn main() {
/// #     let server = tend::testing::etcd::EtcdServer::start().await.unwrap();
/// #     run(server.client().await.unwrap()).await.unwrap();
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct EtcdElectionBuilder {
    client: Client,
    name: String,
    identity: Option<String>,
    prefix: Option<Vec<u8>>,
    config: ElectionConfig,
}

impl fmt::Debug for EtcdElectionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdElectionBuilder")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdElectionBuilder {
    /// The value stored in this candidate's key, shown by
    /// [`EtcdElection::leader`] (default: `pid-{process id}`).
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The key prefix the candidates' keys live under (default:
    /// `tend/elections/{name}/`). Nothing else may be stored under it, and
    /// no other election's prefix may start with it (end it with `/`).
    pub fn prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The timing (default: [`ElectionConfig::default`]).
    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }

    /// The candidate, not campaigning yet.
    ///
    /// # Errors
    ///
    /// [`ElectionBuildError::InvalidName`] when the name is empty or
    /// contains `/`: the default prefix of an election `a` would then also
    /// cover the candidates of an election `a/b`.
    pub fn build(self) -> Result<EtcdElection, ElectionBuildError> {
        if self.name.is_empty() || self.name.contains('/') {
            return Err(ElectionBuildError::InvalidName { name: self.name });
        }
        let prefix = self
            .prefix
            .unwrap_or_else(|| format!("tend/elections/{}/", self.name).into_bytes());
        let identity = self
            .identity
            .unwrap_or_else(|| format!("pid-{}", std::process::id()));
        Ok(EtcdElection {
            inner: Arc::new(Inner {
                name: self.name,
                identity,
                prefix,
                client: self.client,
                config: self.config,
                term: Arc::new(watch::Sender::new(Term {
                    phase: Phase::Idle,
                    renewed: Instant::now(),
                    lease_alive: false,
                })),
                candidacy: Mutex::new(None),
            }),
        })
    }
}

/// Why an [`EtcdElection`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionBuildError {
    /// The election's name is empty or contains `/`.
    #[error("election name `{name}` is empty or contains `/`")]
    InvalidName {
        /// The name given.
        name: String,
    },
}

impl fmt::Debug for EtcdElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdElection")
            .field("name", &self.inner.name)
            .field("identity", &self.inner.identity)
            .field("phase", &self.inner.term.borrow().phase)
            .finish_non_exhaustive()
    }
}

impl EtcdElection {
    /// Starts configuring a candidate of the election `name` (the `name`
    /// label of `leader_election_master_status`).
    pub fn builder(client: Client, name: impl Into<String>) -> EtcdElectionBuilder {
        EtcdElectionBuilder {
            client,
            name: name.into(),
            identity: None,
            prefix: None,
            config: ElectionConfig::default(),
        }
    }

    /// The timing in use.
    #[must_use]
    pub fn config(&self) -> ElectionConfig {
        self.inner.config
    }

    /// Whether this candidate leads now (and its local deadline has not
    /// passed).
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.token().is_some()
    }

    /// This candidate's fencing token while it leads.
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        let term = *self.inner.term.borrow();
        match term.phase {
            Phase::Leading(token) if Instant::now() < self.deadline(&term) => Some(token),
            _ => None,
        }
    }

    /// The identity of the current leader, as stored in etcd (`None` when
    /// no candidate exists).
    ///
    /// # Errors
    ///
    /// [`ElectionError::Backend`] when etcd cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn leader(&self) -> Result<Option<String>, ElectionError> {
        let options = GetOptions::new()
            .with_range(prefix_end(&self.inner.prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let response = self
            .timed(
                self.inner
                    .client
                    .kv_client()
                    .get(self.inner.prefix.clone(), Some(options)),
            )
            .await
            .map_err(|error| self.backend(error))?;
        Ok(response
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    fn deadline(&self, term: &Term) -> Instant {
        crate::etcd::lease::local_deadline(term.renewed, &self.inner.config)
    }

    fn backend(&self, error: impl Into<BoxError>) -> ElectionError {
        ElectionError::Backend {
            election: self.inner.name.clone(),
            source: error.into(),
        }
    }

    async fn timed<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        tokio::time::timeout(self.inner.config.renew_deadline(), request)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }
}

#[async_trait]
impl LeaderElector for EtcdElection {
    fn name(&self) -> &str {
        &self.inner.name
    }

    async fn campaign(&self) -> Result<FencingToken, ElectionError> {
        self.campaign_until_elected().await
    }

    async fn lost(&self) {
        let mut term = self.inner.term.subscribe();
        loop {
            let current = *term.borrow_and_update();
            let Phase::Leading(token) = current.phase else {
                return;
            };
            tokio::select! {
                () = sleep_until(self.deadline(&current)) => {
                    // A renewal may have moved the deadline as the timer
                    // fired: only an expired term is lost.
                    self.inner.term.send_if_modified(|term| {
                        let expired = term.phase == Phase::Leading(token)
                            && Instant::now() >= self.deadline(term);
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
        self.withdraw().await.map_err(|error| self.backend(error))
    }
}

fn timed_out() -> etcd_client::Error {
    etcd_client::Error::IoError(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "etcd request timed out",
    ))
}
