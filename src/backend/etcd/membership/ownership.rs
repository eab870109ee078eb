//! Shard ownership: a record per owned shard, created only if absent and
//! bound to the member's lease; its create revision is the shard's token.

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::oneshot;

use super::EtcdMembership;
use crate::client::FencingToken;
use crate::etcd::fence::Fence;
use crate::shard::unclaimed::{self, Orphans, Unclaimed, Won};
use crate::shard::{MembershipError, Shard};

/// One attempt's outcome.
enum Take {
    /// Owned already, with this token, by an acquire that returned it.
    Owned(FencingToken),
    /// Owned by this attempt, with this token.
    Won(Won<EtcdMembership>),
    /// Another lease's record holds the shard, read at this revision.
    Held(i64),
}

impl Orphans for EtcdMembership {
    fn unclaimed(&self) -> &Unclaimed {
        &self.inner.unclaimed
    }

    fn release_orphan(&self, index: u32, token: FencingToken) {
        self.release_orphan_later(index, token);
    }
}

impl EtcdMembership {
    /// Waits until the shard's record is absent, then creates it.
    pub(super) async fn acquire_shard(
        &self,
        shard: Shard,
    ) -> Result<FencingToken, MembershipError> {
        let index = self.index_of(shard)?;
        loop {
            let token = match self.take_detached(index).await? {
                Take::Owned(token) => token,
                Take::Won(won) => won.returned(),
                Take::Held(at) => {
                    self.wait_deleted(index, at).await?;
                    continue;
                }
            };
            // Released between the answer and now (by a caller that had
            // it): take the shard again.
            if self.owns(index, token) {
                return Ok(token);
            }
        }
    }

    /// Whether this member owns shard `index` with `token` now.
    fn owns(&self, index: u32, token: FencingToken) -> bool {
        self.live()
            .is_some_and(|session| session.owned.get(&index) == Some(&token))
    }

    /// Runs [`take`](Self::take) in a task, so that an acquire dropped
    /// while the request is in flight acquires nothing: a token won for a
    /// caller that is gone is released again, or adopted by the next
    /// acquire of the shard. Each shard's checks, takes and releases run
    /// under its stripe of the `taking` locks, one at a time.
    async fn take_detached(&self, index: u32) -> Result<Take, MembershipError> {
        let (answer, taken) = oneshot::channel();
        let member = self.clone();
        tokio::spawn(async move {
            let _taking = member.lock_shard(index).await;
            let outcome = match member.live() {
                None => Err(member.not_joined()),
                Some(session) => match session.owned.get(&index) {
                    Some(&token) => Ok(member.adopt(index, token)),
                    None => member.take(index, session.lease).await,
                },
            };
            // An answer nobody waits for is dropped here: its token, if
            // no other answer carries it, is released once the lock is free.
            drop(answer.send(outcome));
        });
        taken.await.unwrap_or_else(|_| Err(self.not_joined()))
    }

    /// The shard's stripe of the `taking` locks.
    async fn lock_shard(&self, index: u32) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.taking.lock(index).await
    }

    /// An owned shard's token for a new acquire: one no caller has yet
    /// (another answer carries it, or an orphan's) goes as won, so that its
    /// release waits for this answer too.
    fn adopt(&self, index: u32, token: FencingToken) -> Take {
        if self.inner.unclaimed.share(index, token) {
            Take::Won(Won::new(self, index, token))
        } else {
            Take::Owned(token)
        }
    }

    /// An orphan's token: released from a task (under the shard's lock)
    /// unless an acquire takes it up first. Without a runtime it waits for
    /// the next acquire, or the lease's end.
    fn release_orphan_later(&self, index: u32, token: FencingToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let member = self.clone();
        runtime.spawn(async move {
            let _taking = member.lock_shard(index).await;
            if member.inner.unclaimed.take_orphan(index, token) {
                let _ = member.release_locked(index, token).await;
            }
        });
    }

    /// One attempt: the record created if absent, or read. A record of
    /// this member's own lease (left by an acquire whose release failed)
    /// is adopted.
    async fn take(&self, index: u32, lease: i64) -> Result<Take, MembershipError> {
        let key = self.shard_key(index);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                key.clone(),
                self.inner.id.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(key, None)]);
        let kv = self.inner.client.kv_client();
        let response = self
            .timed(kv.clone().txn(txn))
            .await
            .map_err(|error| self.backend(error))?;
        let at = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let token = if response.succeeded() {
            at
        } else {
            let existing = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get
                    .kvs()
                    .first()
                    .map(|kv| (kv.lease(), kv.create_revision())),
                _ => None,
            });
            match existing {
                Some((owner, created)) if owner == lease => created,
                _ => return Ok(Take::Held(at)),
            }
        };
        let token = u64::try_from(token)
            .map(FencingToken::new)
            .map_err(|error| self.backend(error))?;
        if self.record(lease, index, token) {
            self.inner.unclaimed.won(index, token);
            Ok(Take::Won(Won::new(self, index, token)))
        } else {
            // The session ended meanwhile: its lease's records go with it.
            Err(self.not_joined())
        }
    }

    /// Records the shard as owned with `token`, if the session of `lease`
    /// is still live.
    fn record(&self, lease: i64, index: u32, token: FencingToken) -> bool {
        let live = self.live().is_some_and(|s| s.lease == lease);
        live && self.inner.status.send_if_modified(|status| {
            let Some(session) = status.session.as_mut().filter(|s| s.lease == lease) else {
                return false;
            };
            session.owned.insert(index, token);
            true
        })
    }

    /// Waits until the shard's record, read at revision `at`, is deleted,
    /// or this membership ends.
    async fn wait_deleted(&self, index: u32, at: i64) -> Result<(), MembershipError> {
        let options = WatchOptions::new().with_start_revision(at + 1);
        let mut watches = self.inner.client.watch_client();
        let watch = watches.watch(self.shard_key(index), Some(options));
        let mut stream = self
            .timed(watch)
            .await
            .map_err(|error| self.backend(error))?;
        loop {
            tokio::select! {
                () = self.until_lost() => return Err(self.not_joined()),
                message = stream.message() => {
                    let Some(response) = message.map_err(|error| self.backend(error))? else {
                        return Ok(());
                    };
                    let deleted = response.events().iter().any(|event| {
                        event.event_type() == etcd_client::EventType::Delete
                    });
                    if deleted || response.canceled() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Gives the shard up if it is owned with `token`.
    pub(super) async fn release_shard(
        &self,
        shard: Shard,
        token: FencingToken,
    ) -> Result<(), MembershipError> {
        match self.index_of(shard) {
            Ok(index) => {
                let _taking = self.lock_shard(index).await;
                self.release_locked(index, token).await
            }
            Err(_) => Ok(()),
        }
    }

    /// Forgets the shard at once (its token is stale from here on), then
    /// deletes its record if its create revision is still `token`.
    /// (The caller holds the `taking` lock.)
    async fn release_locked(&self, index: u32, token: FencingToken) -> Result<(), MembershipError> {
        self.inner.unclaimed.forget(index, token);
        let owned = self.inner.status.send_if_modified(|status| {
            let Some(session) = status.session.as_mut() else {
                return false;
            };
            let ours = session.owned.get(&index) == Some(&token);
            if ours {
                session.owned.remove(&index);
            }
            ours
        });
        let Some(created) = super::super::fence::revision_of(token) else {
            return Ok(());
        };
        if !owned {
            return Ok(());
        }
        let key = self.shard_key(index);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                created,
            )])
            .and_then(vec![TxnOp::delete(key, None)]);
        let kv = self.inner.client.kv_client();
        self.timed(kv.clone().txn(txn))
            .await
            .map(drop)
            .map_err(|error| self.backend(error))
    }

    /// The fence of a write with `token`: `None` unless this member owns a
    /// shard with `token` now (before its local deadline). The write's
    /// transaction then requires the shard's record with `token` as its
    /// create revision.
    pub(in crate::backend::etcd) fn fence(&self, token: FencingToken) -> Option<Fence> {
        let session = self.live()?;
        let (&index, _) = session.owned.iter().find(|&(_, &t)| t == token)?;
        let created = super::super::fence::revision_of(token)?;
        let key = self.shard_key(index);
        Some(Fence::new(
            token,
            vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                created,
            )],
            vec![TxnOp::get(key, Some(GetOptions::new().with_keys_only()))],
        ))
    }

    fn index_of(&self, shard: Shard) -> Result<u32, MembershipError> {
        unclaimed::index_of(&self.inner.group, self.inner.shards, shard)
    }
}
