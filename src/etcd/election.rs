//! `EtcdElection`: leader election on an etcd lease, with fencing tokens.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::task::AbortOnDropHandle;

use super::config::ElectionConfig;
use super::prefix_end;
use crate::manager::{ElectionError, LeaderElector};
use crate::source::BoxError;

/// Where this candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Campaigning,
    Leading(u64),
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
/// or at once when etcd reports the lease gone.
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
/// use tend::etcd::{ElectionConfig, EtcdElection};
/// use tend::manager::LeaderElector;
///
/// # async fn run(client: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let election = EtcdElection::builder(client, "my-operator")
///     .identity("replica-1")
///     .config(ElectionConfig::default())
///     .build();
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
    /// `tend/elections/{name}/`). Nothing else may be stored under it.
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
    #[must_use]
    pub fn build(self) -> EtcdElection {
        let prefix = self
            .prefix
            .unwrap_or_else(|| format!("tend/elections/{}/", self.name).into_bytes());
        let identity = self
            .identity
            .unwrap_or_else(|| format!("pid-{}", std::process::id()));
        EtcdElection {
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
        }
    }
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

/// Why one campaign attempt ended early.
#[derive(Debug, thiserror::Error)]
enum Attempt {
    #[error("etcd request failed")]
    Etcd(#[from] etcd_client::Error),
    #[error("the candidacy's lease expired or could not be renewed in time")]
    LeaseLost,
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
    pub fn token(&self) -> Option<u64> {
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
        term.renewed + self.inner.config.renew_deadline()
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

    /// The comparisons that make a write fenced by `token`: the current
    /// candidacy's key exists with `token` as its create revision, and no
    /// candidate is older. `None` without a candidacy.
    pub(super) fn fence_compares(&self, token: u64) -> Option<Vec<Compare>> {
        let key = self.inner.candidacy.lock().as_ref()?.key.clone();
        let token = i64::try_from(token).ok()?;
        Some(vec![
            Compare::create_revision(key, CompareOp::Equal, token),
            Compare::create_revision(self.inner.prefix.clone(), CompareOp::Greater, token - 1)
                .with_range(prefix_end(&self.inner.prefix)),
        ])
    }

    /// Whether the oldest candidate's create revision is `token` (true when
    /// etcd cannot tell).
    pub(super) async fn token_holds(&self, token: u64) -> bool {
        let options = GetOptions::new()
            .with_range(prefix_end(&self.inner.prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        let mut kv = self.inner.client.kv_client();
        match self
            .timed(kv.get(self.inner.prefix.clone(), Some(options)))
            .await
        {
            Ok(response) => response
                .kvs()
                .first()
                .is_some_and(|kv| u64::try_from(kv.create_revision()).ok() == Some(token)),
            Err(_) => true,
        }
    }

    /// One campaign: a new lease and key, then wait for our turn.
    async fn attempt(&self) -> Result<u64, Attempt> {
        let inner = &self.inner;
        let sent = Instant::now();
        let granted = self
            .timed(
                inner
                    .client
                    .lease_client()
                    .grant(inner.config.ttl_seconds(), None),
            )
            .await?;
        let lease = granted.id();
        inner.term.send_replace(Term {
            phase: Phase::Campaigning,
            renewed: sent,
            lease_alive: true,
        });
        let keeper = tokio::spawn(keep_alive(
            inner.client.clone(),
            lease,
            inner.config,
            Arc::clone(&inner.term),
        ));
        let mut key = inner.prefix.clone();
        key.extend(format!("{lease:016x}").into_bytes());
        *inner.candidacy.lock() = Some(Candidacy {
            key: key.clone(),
            lease,
            _keeper: AbortOnDropHandle::new(keeper),
        });
        let created = self.create_key(&key, lease).await?;
        self.wait_turn(created).await?;
        let token = u64::try_from(created).unwrap_or(0);
        let won = inner.term.send_if_modified(|term| {
            let alive = term.lease_alive && Instant::now() < self.deadline(term);
            if alive {
                term.phase = Phase::Leading(token);
            }
            alive
        });
        if won {
            Ok(token)
        } else {
            Err(Attempt::LeaseLost)
        }
    }

    /// Creates the candidate key bound to `lease`; returns its create
    /// revision.
    async fn create_key(&self, key: &[u8], lease: i64) -> Result<i64, Attempt> {
        let txn = Txn::new()
            .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(
                key,
                self.inner.identity.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(key, None)]);
        let response = self.timed(self.inner.client.kv_client().txn(txn)).await?;
        if response.succeeded() {
            return Ok(response
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision));
        }
        let existing = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(etcd_client::KeyValue::create_revision),
            _ => None,
        });
        existing.ok_or(Attempt::LeaseLost)
    }

    /// Waits until no candidate older than `created` is left.
    async fn wait_turn(&self, created: i64) -> Result<(), Attempt> {
        let inner = &self.inner;
        let mut term = inner.term.subscribe();
        loop {
            let options = GetOptions::new()
                .with_range(prefix_end(&inner.prefix))
                .with_max_create_revision(created - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_keys_only();
            let older = self
                .timed(
                    inner
                        .client
                        .kv_client()
                        .get(inner.prefix.clone(), Some(options)),
                )
                .await?;
            let Some(ahead) = older.kvs().first() else {
                return Ok(());
            };
            let at = older
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision);
            let options = WatchOptions::new().with_start_revision(at + 1);
            let mut watch = self
                .timed(
                    inner
                        .client
                        .watch_client()
                        .watch(ahead.key(), Some(options)),
                )
                .await?;
            loop {
                tokio::select! {
                    lost = term.wait_for(|t| !t.lease_alive) => {
                        drop(lost);
                        return Err(Attempt::LeaseLost);
                    }
                    message = watch.message() => match message? {
                        None => break,
                        Some(response) if response.canceled() => break,
                        Some(response) => {
                            let deleted = response.events().iter().any(|event| {
                                event.kv().is_some_and(|kv| kv.version() == 0)
                            });
                            if deleted {
                                break;
                            }
                        }
                    },
                }
            }
        }
    }

    /// Drops the candidacy and revokes its lease.
    async fn withdraw(&self) -> Result<(), etcd_client::Error> {
        let candidacy = self.inner.candidacy.lock().take();
        self.inner.term.send_modify(|term| {
            term.phase = Phase::Idle;
            term.lease_alive = false;
        });
        if let Some(candidacy) = candidacy {
            let lease = candidacy.lease;
            drop(candidacy);
            self.timed(self.inner.client.lease_client().revoke(lease))
                .await?;
        }
        Ok(())
    }
}

/// Withdraws a campaign dropped before it won (without revoking: the lease
/// expires on its own).
struct CampaignGuard<'a> {
    election: &'a EtcdElection,
    armed: bool,
}

impl Drop for CampaignGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            drop(self.election.inner.candidacy.lock().take());
            self.election.inner.term.send_modify(|term| {
                term.phase = Phase::Idle;
                term.lease_alive = false;
            });
        }
    }
}

#[async_trait]
impl LeaderElector for EtcdElection {
    fn name(&self) -> &str {
        &self.inner.name
    }

    async fn campaign(&self) -> Result<u64, ElectionError> {
        if let Some(token) = self.token() {
            return Ok(token);
        }
        let mut guard = CampaignGuard {
            election: self,
            armed: true,
        };
        loop {
            match self.attempt().await {
                Ok(token) => {
                    guard.armed = false;
                    tracing::info!(election = %self.inner.name, token, "elected");
                    return Ok(token);
                }
                Err(Attempt::Etcd(error)) if is_refusal(&error) => {
                    let _ = self.withdraw().await;
                    return Err(self.backend(error));
                }
                Err(error) => {
                    tracing::warn!(
                        election = %self.inner.name,
                        error = %crate::source::error_chain(&error),
                        "campaign failed, retrying"
                    );
                    if let Err(error) = self.withdraw().await {
                        tracing::debug!(%error, "revoking the failed candidacy's lease failed");
                    }
                    tokio::time::sleep(self.inner.config.retry_period()).await;
                }
            }
        }
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
                    self.inner.term.send_if_modified(|term| {
                        let leading = term.phase == Phase::Leading(token);
                        if leading {
                            term.phase = Phase::Lost;
                        }
                        leading
                    });
                    return;
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

/// Whether etcd refused a request for good (retrying will not help).
fn is_refusal(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::InvalidArgument | Code::PermissionDenied | Code::Unauthenticated
        ),
        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_) => true,
        _ => false,
    }
}

fn timed_out() -> etcd_client::Error {
    etcd_client::Error::IoError(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "etcd request timed out",
    ))
}

/// Renews `lease` every retry period until it is gone or a renewal is
/// overdue; publishes each renewal in `term`.
async fn keep_alive(
    client: Client,
    lease: i64,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
) {
    let mut leases = client.lease_client();
    let mut channel: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut tick = tokio::time::interval(config.retry_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let deadline = term.borrow().renewed + config.renew_deadline();
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        let renewal = renew(&mut leases, &mut channel, lease);
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(true)) => term.send_modify(|term| term.renewed = sent),
            Ok(Ok(false)) => break,
            Ok(Err(error)) => {
                tracing::debug!(%error, lease, "renewing the lease failed");
                channel = None;
            }
            Err(_) => break,
        }
    }
    tracing::warn!(lease, "the election lease is gone or overdue");
    term.send_modify(|term| {
        term.lease_alive = false;
        if matches!(term.phase, Phase::Leading(_)) {
            term.phase = Phase::Lost;
        }
    });
}

/// One renewal; `Ok(false)` when etcd says the lease is gone.
async fn renew(
    leases: &mut etcd_client::LeaseClient,
    channel: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    lease: i64,
) -> Result<bool, etcd_client::Error> {
    let Some((keeper, stream)) = channel else {
        // Opening the stream renews once.
        return match leases.keep_alive(lease).await {
            Ok(opened) => {
                *channel = Some(opened);
                Ok(true)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(message))
                if message == "lease not found" =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        };
    };
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(response) => Ok(response.ttl() > 0),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "keep-alive stream ended".to_owned(),
        )),
    }
}
