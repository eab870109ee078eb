//! Shard ownership: a Lease per shard naming the session that owns it,
//! written over the version read; the write's `resourceVersion` is the
//! shard's token.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::{KubeMembership, Session};
use crate::client::FencingToken;
use crate::kube::election::record::{self, Observed, Verdict};
use crate::kube::endpoint::status_code;
use crate::kube::parse_revision;
use crate::shard::unclaimed::{self, Orphans, Unclaimed, Won};
use crate::shard::{MembershipError, Shard};

/// One attempt's outcome.
enum Take {
    /// Owned already, with this token, by an acquire that returned it.
    Owned(FencingToken),
    /// Owned by this attempt, with this token.
    Won(Won<KubeMembership>),
    /// Another live session holds the shard, until at least this instant
    /// unless it renews; or a concurrent write came first.
    Wait(Instant),
}

/// What a member Lease says of a session.
enum Judged {
    /// Renewed within its lease, until at least this instant.
    Live(Instant),
    /// Ended: its member Lease names another session or none, or has been
    /// gone for a lease.
    Ended,
    /// Unrenewed for its lease: to be retired before its shard is taken.
    Expired,
}

/// Whether the session a shard's Lease names still holds it.
enum Holder {
    /// No session, this one, or one that has ended.
    Free,
    /// A live session, until at least this instant.
    Live(Instant),
}

impl Orphans for KubeMembership {
    fn unclaimed(&self) -> &Unclaimed {
        &self.inner.unclaimed
    }

    /// Releases the orphan from a task (under the shard's lock), unless
    /// an acquire takes it up first. Without a runtime it waits for the
    /// next acquire, or the session's end.
    fn release_orphan(&self, index: u32, token: FencingToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let member = self.clone();
        runtime.spawn(async move {
            let _taking = member.lock_shard(index).await;
            let session = member.inner.session.lock().clone();
            if let Some(session) = session
                && member.inner.unclaimed.take_orphan(index, token)
            {
                let _ = member.release_owned(&session, index, token).await;
            }
        });
    }
}

impl KubeMembership {
    /// Waits until the shard's Lease names no live session, then writes
    /// this member's into it.
    pub(super) async fn acquire_shard(
        &self,
        shard: Shard,
    ) -> Result<FencingToken, MembershipError> {
        let index = self.index_of(shard)?;
        let mut changes = self.inner.view.holders();
        loop {
            changes.borrow_and_update();
            let token = match self.take_detached(index).await? {
                Take::Owned(token) => token,
                Take::Won(won) => won.returned(),
                Take::Wait(until) => {
                    self.wait(&mut changes, until).await?;
                    continue;
                }
            };
            // Released between the answer and now: take it again.
            if self.owns(index, token) {
                return Ok(token);
            }
        }
    }

    /// Waits for a Lease's holder to change, `until`, or at most a retry
    /// period (a change the view has not seen yet is found then).
    async fn wait(
        &self,
        changes: &mut watch::Receiver<u64>,
        until: Instant,
    ) -> Result<(), MembershipError> {
        let period = crate::time::deadline(Instant::now(), self.inner.config.retry_period());
        tokio::select! {
            () = self.until_lost() => Err(self.not_joined()),
            _ = changes.changed() => Ok(()),
            () = tokio::time::sleep_until(until.min(period)) => Ok(()),
        }
    }

    /// Whether this member owns shard `index` with `token` now.
    fn owns(&self, index: u32, token: FencingToken) -> bool {
        self.live()
            .is_some_and(|session| session.owned.lock().get(&index) == Some(&token))
    }

    /// Runs [`take`](Self::take) in a task, so that an acquire dropped
    /// while its write is in flight acquires nothing: a token won for a
    /// caller that is gone is released again, or adopted by the next
    /// acquire of the shard.
    async fn take_detached(&self, index: u32) -> Result<Take, MembershipError> {
        let (answer, taken) = oneshot::channel();
        let member = self.clone();
        tokio::spawn(async move {
            let _taking = member.lock_shard(index).await;
            let outcome = match member.live() {
                None => Err(member.not_joined()),
                Some(session) => {
                    let owned = session.owned.lock().get(&index).copied();
                    match owned {
                        Some(token) => Ok(member.adopt(index, token)),
                        None => member.take(index, &session).await,
                    }
                }
            };
            drop(answer.send(outcome));
        });
        taken.await.unwrap_or_else(|_| Err(self.not_joined()))
    }

    /// The shard's stripe of the `taking` locks.
    pub(super) async fn lock_shard(&self, index: u32) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.taking.lock(index).await
    }

    /// An owned shard's token for a new acquire (see the etcd membership).
    fn adopt(&self, index: u32, token: FencingToken) -> Take {
        if self.inner.unclaimed.share(index, token) {
            Take::Won(Won::new(self, index, token))
        } else {
            Take::Owned(token)
        }
    }

    /// One attempt: the shard's Lease read, and written with this session
    /// when it is free.
    async fn take(&self, index: u32, session: &Session) -> Result<Take, MembershipError> {
        let name = self.shard_lease(index);
        let read = self.timed(self.inner.leases.get_opt(&name)).await?;
        let lease = match read {
            None => self.new_shard_lease(index),
            Some(lease) => match self.holder(&lease, session).await? {
                Holder::Live(until) => return Ok(Take::Wait(until)),
                Holder::Free => lease,
            },
        };
        let token = match self.claim(lease, session).await {
            Ok(Some(token)) => token,
            Ok(None) => return Ok(Take::Wait(Instant::now())),
            Err(error) => {
                // The write may have landed unanswered: a shard named by
                // this session but owned by none of its acquires would
                // stay taken until the session ends.
                let _ = self.clear_if_ours(index, session).await;
                return Err(error);
            }
        };
        if !self.record(session, index, token) {
            // The session ended meanwhile: the Lease names a session that
            // others count as ended.
            return Err(self.not_joined());
        }
        self.inner.unclaimed.won(index, token);
        Ok(Take::Won(Won::new(self, index, token)))
    }

    /// Whether the session `lease` names still holds it (read live: a
    /// cache behind could show an earlier session of its member). A session
    /// found expired is retired first: its member Lease's holder cleared
    /// over the version judged, so that a renewal of it still in flight is
    /// refused and ends the session, rather than landing beside this
    /// member's ownership.
    async fn holder(&self, lease: &Lease, session: &Session) -> Result<Holder, MembershipError> {
        let Some(holder) = record::holder(lease.spec.as_ref()) else {
            return Ok(Holder::Free);
        };
        if holder == session.identity() {
            return Ok(Holder::Free);
        }
        let id = holder.rsplit_once('/').map_or(holder, |(id, _)| id);
        let name = self.member_lease(id);
        let sent = Instant::now();
        let member = self.timed(self.inner.leases.get_opt(&name)).await?;
        match self.judge(&name, member.as_ref(), holder, sent) {
            Judged::Live(until) => Ok(Holder::Live(until)),
            Judged::Ended => Ok(Holder::Free),
            Judged::Expired => match member {
                Some(member) => self.retire(member).await,
                None => Ok(Holder::Free),
            },
        }
    }

    /// The session `holder` as its member Lease `name` (read from a
    /// request sent at `sent`) shows it. A version seen first in this
    /// answer counts from the answer (the renewal that wrote it may have
    /// come after the request left); expiry is judged at the request's
    /// send (the answer may have come late).
    fn judge(&self, name: &str, member: Option<&Lease>, holder: &str, sent: Instant) -> Judged {
        let received = Instant::now();
        let mut observed = self.inner.observed.lock();
        let absent = Lease::default();
        let seen = Observed::after(observed.remove(name), member.unwrap_or(&absent), received);
        let judged = match member {
            // Gone: ended once unseen for a lease (a leave deletes it
            // only after its session ended; by hand, it may not have).
            None => {
                let until = crate::time::deadline(seen.at(), self.inner.config.lease());
                if sent < until {
                    Judged::Live(until)
                } else {
                    Judged::Ended
                }
            }
            Some(member) if record::holder(member.spec.as_ref()) != Some(holder) => Judged::Ended,
            Some(member) => match record::verdict(member.spec.as_ref(), "", &seen, sent) {
                Verdict::Held { until, .. } => Judged::Live(until),
                Verdict::Take => Judged::Expired,
            },
        };
        observed.insert(name.to_owned(), seen);
        judged
    }

    /// Clears the holder of an expired session's member Lease over the
    /// version judged: free once written (or gone); live when another
    /// write came first (a renewal: judged again at once).
    async fn retire(&self, mut member: Lease) -> Result<Holder, MembershipError> {
        let name = member.metadata.name.clone().unwrap_or_default();
        if let Some(spec) = member.spec.as_mut() {
            spec.holder_identity = None;
        }
        let params = PostParams::default();
        let write = self.inner.leases.replace(&name, &params, &member);
        match tokio::time::timeout(self.inner.config.renew_deadline(), write).await {
            Ok(Ok(_)) => Ok(Holder::Free),
            Ok(Err(error)) => match status_code(&error) {
                Some(404) => Ok(Holder::Free),
                Some(409) => Ok(Holder::Live(Instant::now())),
                _ => Err(self.backend(error)),
            },
            Err(_) => Err(self.backend("no answer from the API server within the renew deadline")),
        }
    }

    /// A new shard Lease, naming no one yet.
    fn new_shard_lease(&self, index: u32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.shard_lease(index)),
                namespace: Some(self.inner.namespace.clone()),
                labels: Some(self.labels()),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    /// Writes `session` into `lease` over the version read (creating it
    /// when it has none); `None` when another write came first.
    async fn claim(
        &self,
        mut lease: Lease,
        session: &Session,
    ) -> Result<Option<FencingToken>, MembershipError> {
        let transitions = lease.spec.as_ref().and_then(|spec| spec.lease_transitions);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(session.identity().to_owned()),
            acquire_time: Some(MicroTime(Timestamp::now())),
            lease_transitions: Some(transitions.unwrap_or(0).saturating_add(1)),
            ..LeaseSpec::default()
        });
        let params = PostParams::default();
        let written = if lease.metadata.resource_version.is_some() {
            let name = lease.metadata.name.clone().unwrap_or_default();
            self.timed_write(self.inner.leases.replace(&name, &params, &lease))
                .await?
        } else {
            self.timed_write(self.inner.leases.create(&params, &lease))
                .await?
        };
        let Some(written) = written else {
            return Ok(None);
        };
        let version = written.metadata.resource_version.unwrap_or_default();
        let revision = parse_revision(&version).map_err(|error| self.backend(error))?;
        Ok(Some(FencingToken::new(revision.get())))
    }

    /// A conditional write: `None` on a `409` (another write came first).
    async fn timed_write(
        &self,
        write: impl Future<Output = kube::Result<Lease>>,
    ) -> Result<Option<Lease>, MembershipError> {
        match tokio::time::timeout(self.inner.config.renew_deadline(), write).await {
            Ok(Ok(lease)) => Ok(Some(lease)),
            Ok(Err(error)) if status_code(&error) == Some(409) => Ok(None),
            Ok(Err(error)) => Err(self.backend(error)),
            Err(_) => Err(self.backend("no answer from the API server within the renew deadline")),
        }
    }

    /// Records the shard as owned with `token`, if `session` is still the
    /// live one.
    fn record(&self, session: &Session, index: u32, token: FencingToken) -> bool {
        let live = self
            .live()
            .is_some_and(|live| live.identity() == session.identity());
        if live {
            session.owned.lock().insert(index, token);
        }
        live
    }

    /// Gives the shard up if it is owned with `token`.
    pub(super) async fn release_shard(
        &self,
        shard: Shard,
        token: FencingToken,
    ) -> Result<(), MembershipError> {
        let Ok(index) = self.index_of(shard) else {
            return Ok(());
        };
        let _taking = self.lock_shard(index).await;
        let session = self.inner.session.lock().clone();
        match session {
            Some(session) => self.release_owned(&session, index, token).await,
            None => Ok(()),
        }
    }

    /// Forgets the shard at once (its token is stale from here on), then
    /// clears its Lease's holder if it names this session. (The caller
    /// holds the shard's `taking` lock.)
    pub(super) async fn release_owned(
        &self,
        session: &Session,
        index: u32,
        token: FencingToken,
    ) -> Result<(), MembershipError> {
        self.inner.unclaimed.forget(index, token);
        {
            let mut owned = session.owned.lock();
            if owned.get(&index) != Some(&token) {
                return Ok(());
            }
            owned.remove(&index);
        }
        self.clear_if_ours(index, session).await
    }

    /// Clears the shard's Lease, over the version read, if it names
    /// `session` (whose acquires do not own the shard: the caller holds
    /// its `taking` lock and has forgotten it).
    async fn clear_if_ours(&self, index: u32, session: &Session) -> Result<(), MembershipError> {
        let name = self.shard_lease(index);
        let Some(mut lease) = self.timed(self.inner.leases.get_opt(&name)).await? else {
            return Ok(());
        };
        if record::holder(lease.spec.as_ref()) != Some(session.identity()) {
            return Ok(());
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        let params = PostParams::default();
        let write = self.inner.leases.replace(&name, &params, &lease);
        self.timed_write(write).await.map(drop)
    }

    fn index_of(&self, shard: Shard) -> Result<u32, MembershipError> {
        unclaimed::index_of(&self.inner.group, self.inner.shards, shard)
    }
}
