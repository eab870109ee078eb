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
/// use tend::etcd::{ElectionConfig, EtcdElection};
/// use tend::manager::LeaderElector;
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

/// Why one campaign attempt ended early.
#[derive(Debug, thiserror::Error)]
enum Attempt {
    #[error("etcd request failed")]
    Etcd(#[from] etcd_client::Error),
    #[error("the candidacy's lease expired or could not be renewed in time")]
    LeaseLost,
    #[error("the candidacy's key was deleted")]
    KeyLost,
}

/// Where a candidate stands in the queue, read in one transaction.
enum Turn {
    /// Its key exists and no candidate is older.
    Ours,
    /// The key of the candidate just older, at the store revision read.
    Behind { key: Vec<u8>, at: i64 },
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
        local_deadline(term, &self.inner.config)
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

    /// The fence of a write with `token`: `None` unless this candidate
    /// leads with `token` now (before its local deadline).
    pub(super) fn fence(&self, token: u64) -> Option<Fence> {
        if self.token() != Some(token) {
            return None;
        }
        let key = self.inner.candidacy.lock().as_ref()?.key.clone();
        let created = i64::try_from(token).ok()?;
        let prefix = &self.inner.prefix;
        let oldest = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        Some(Fence {
            compares: vec![
                Compare::create_revision(key.clone(), CompareOp::Equal, created),
                Compare::create_revision(prefix.clone(), CompareOp::Greater, created - 1)
                    .with_range(prefix_end(prefix)),
            ],
            reads: vec![
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(prefix.clone(), Some(oldest)),
            ],
            token,
        })
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
        let mut key = inner.prefix.clone();
        key.extend(format!("{lease:016x}").into_bytes());
        let keeper = tokio::spawn(keep_alive(
            inner.client.clone(),
            Lease {
                id: lease,
                key: key.clone(),
            },
            inner.config,
            Arc::clone(&inner.term),
        ));
        *inner.candidacy.lock() = Some(Candidacy {
            key: key.clone(),
            lease,
            _keeper: AbortOnDropHandle::new(keeper),
        });
        let created = self.create_key(&key, lease).await?;
        self.wait_turn(&key, created).await?;
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

    /// Waits until no candidate older than `created` is left, and fails
    /// when this candidate's own key (created at `created`) is gone.
    async fn wait_turn(&self, key: &[u8], created: i64) -> Result<(), Attempt> {
        let mut term = self.inner.term.subscribe();
        loop {
            let Turn::Behind { key: ahead, at } = self.turn(key, created).await? else {
                return Ok(());
            };
            let options = WatchOptions::new().with_start_revision(at + 1);
            let mut watch = self
                .timed(self.inner.client.watch_client().watch(ahead, Some(options)))
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

    /// Reads, in one transaction (one revision), whether this candidate's
    /// key still exists with create revision `created` and whether an older
    /// candidate is left.
    async fn turn(&self, key: &[u8], created: i64) -> Result<Turn, Attempt> {
        let prefix = &self.inner.prefix;
        let older = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_max_create_revision(created - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new()
            .when(vec![
                Compare::create_revision(key, CompareOp::Equal, created),
                Compare::create_revision(prefix.clone(), CompareOp::Greater, created - 1)
                    .with_range(prefix_end(prefix)),
            ])
            .or_else(vec![
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(prefix.clone(), Some(older)),
            ]);
        let response = self.timed(self.inner.client.kv_client().txn(txn)).await?;
        if response.succeeded() {
            return Ok(Turn::Ours);
        }
        let at = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let mut reads = response.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(|kv| (kv.key().to_vec(), kv.create_revision())),
            _ => None,
        });
        let own = reads.next().flatten();
        if own.map(|(_, revision)| revision) != Some(created) {
            return Err(Attempt::KeyLost);
        }
        match reads.next().flatten() {
            Some((key, _)) => Ok(Turn::Behind { key, at }),
            // Refused, yet our key is the oldest: not at one revision,
            // which etcd guarantees; count it as a lost candidacy.
            None => Err(Attempt::KeyLost),
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

/// What makes a write fenced by a token: comparisons that hold while the
/// token's candidate leads (its key exists with the token as its create
/// revision, and no candidate is older), and reads that tell, when the
/// transaction is refused, whether the fence was why.
pub(super) struct Fence {
    /// Added to the write's comparisons.
    pub(super) compares: Vec<Compare>,
    /// Added to the end of the write's `or_else` operations.
    pub(super) reads: Vec<TxnOp>,
    token: u64,
}

impl Fence {
    /// The token the fence checks.
    pub(super) fn token(&self) -> u64 {
        self.token
    }

    /// Whether the fence held in a refused transaction, from the responses
    /// to [`reads`](Self::reads) (in order). An unreadable answer counts as
    /// not holding.
    pub(super) fn held(&self, reads: &[TxnOpResponse]) -> bool {
        let token = i64::try_from(self.token).ok();
        reads.len() == 2
            && reads.iter().all(|read| match read {
                TxnOpResponse::Get(get) => {
                    get.kvs()
                        .first()
                        .map(etcd_client::KeyValue::create_revision)
                        == token
                }
                _ => false,
            })
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

/// Whether etcd refused a request for good (retrying will not help).
fn is_refusal(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::InvalidArgument
                | Code::OutOfRange
                | Code::PermissionDenied
                | Code::Unauthenticated
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

/// A candidacy's lease and the key bound to it, for the keeper.
struct Lease {
    id: i64,
    key: Vec<u8>,
}

/// The local deadline of a term: its last renewal plus the renew deadline.
fn local_deadline(term: &Term, config: &ElectionConfig) -> Instant {
    crate::time::deadline(term.renewed, config.renew_deadline())
}

/// Renews the lease every retry period until it is gone, a renewal is
/// overdue, the leader's key is gone, or the candidacy ended (lost or
/// idle); publishes each renewal in `term`. A renewal while leading counts
/// only once the leader's key is read back with the token as its create
/// revision.
async fn keep_alive(
    client: Client,
    lease: Lease,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
) {
    let mut leases = client.lease_client();
    let mut kv = client.kv_client();
    let mut channel: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut tick = tokio::time::interval(config.retry_period());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = *term.borrow();
        if matches!(current.phase, Phase::Lost | Phase::Idle) {
            // The candidacy ended (its local deadline passed): stop holding
            // the key, so that another candidate wins at once.
            revoke_quietly(&mut leases, lease.id, &config).await;
            break;
        }
        let deadline = local_deadline(&current, &config);
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        let renewal = async {
            if !renew(&mut leases, &mut channel, lease.id).await? {
                return Ok(false);
            }
            match current.phase {
                Phase::Leading(token) => owns_key(&mut kv, &lease.key, token).await,
                _ => Ok(true),
            }
        };
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(true)) => term.send_modify(|term| term.renewed = sent),
            Ok(Ok(false)) => {
                revoke_quietly(&mut leases, lease.id, &config).await;
                break;
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, lease = lease.id, "renewing the lease failed");
                channel = None;
            }
            Err(_) => break,
        }
    }
    tracing::warn!(
        lease = lease.id,
        "the election lease or key is gone or overdue"
    );
    term.send_modify(|term| {
        term.lease_alive = false;
        if matches!(term.phase, Phase::Leading(_)) {
            term.phase = Phase::Lost;
        }
    });
}

/// Revokes a lease no longer wanted, best effort (it expires anyway).
async fn revoke_quietly(
    leases: &mut etcd_client::LeaseClient,
    lease: i64,
    config: &ElectionConfig,
) {
    let revoke = leases.revoke(lease);
    if let Ok(Err(error)) = tokio::time::timeout(config.renew_deadline(), revoke).await {
        tracing::debug!(%error, lease, "revoking the lease failed");
    }
}

/// Whether `key` exists with `token` as its create revision.
async fn owns_key(
    kv: &mut etcd_client::KvClient,
    key: &[u8],
    token: u64,
) -> Result<bool, etcd_client::Error> {
    let response = kv
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await?;
    let created = response
        .kvs()
        .first()
        .map(etcd_client::KeyValue::create_revision);
    Ok(created.and_then(|revision| u64::try_from(revision).ok()) == Some(token))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_etcd_refuses_is_final() {
        let refused = etcd_client::Error::GRpcStatus(tonic::Status::out_of_range(
            "etcdserver: too large lease TTL",
        ));
        assert!(is_refusal(&refused));
        let unavailable = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("down"));
        assert!(!is_refusal(&unavailable));
    }
}
