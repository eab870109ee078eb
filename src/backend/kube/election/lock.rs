//! The Lease as a lock: reads and the writes that take, renew and release
//! it, each conditional on the `resourceVersion` read (optimistic
//! concurrency: of two candidates writing over one version, one wins and
//! the other gets a `409 Conflict`).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

use super::record::{self, Observed, Verdict};
use crate::kube::endpoint::status_code;

/// One election's Lease, seen by one candidate.
#[derive(Clone)]
pub(super) struct LeaseLock {
    pub(super) api: Api<Lease>,
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) identity: String,
    pub(super) lease_seconds: i32,
    /// Set on the Lease when this candidate creates it (a membership's
    /// member Leases carry their group's).
    pub(super) labels: BTreeMap<String, String>,
}

/// How one attempt to take the Lease ended.
#[derive(Debug)]
pub(super) enum Attempt {
    /// Written with this candidate as the holder: the Lease as stored.
    Acquired(Box<Lease>),
    /// Another candidate holds it.
    Held { holder: String, until: Instant },
    /// Another write came first (a `409`): read again.
    Contended,
}

/// How one renewal by the leader ended.
#[derive(Debug)]
pub(super) enum Renewal {
    /// Renewed: the Lease as stored.
    Renewed(Box<Lease>),
    /// Another candidate holds the Lease now (`None`: it was deleted, or
    /// released by hand).
    Taken(Option<String>),
}

impl LeaseLock {
    /// The Lease, or `None` when it does not exist.
    pub(super) async fn get(&self) -> kube::Result<Option<Lease>> {
        self.api.get_opt(&self.name).await
    }

    /// Reads the Lease and takes it when it is free, expired or ours
    /// (creating it when missing); `observed` carries what this candidate
    /// saw between attempts.
    pub(super) async fn try_acquire(
        &self,
        observed: &mut Option<Observed>,
    ) -> kube::Result<Attempt> {
        let Some(lease) = self.get().await? else {
            return self.create().await;
        };
        let now = Instant::now();
        let seen = Observed::after(observed.take(), &lease, now);
        let verdict = record::verdict(lease.spec.as_ref(), &self.identity, &seen, now);
        *observed = Some(seen);
        match verdict {
            Verdict::Held { holder, until } => Ok(Attempt::Held { holder, until }),
            Verdict::Take => match self.write_claim(lease).await {
                Ok(lease) => Ok(Attempt::Acquired(Box::new(lease))),
                Err(error) if status_code(&error) == Some(409) => Ok(Attempt::Contended),
                Err(error) => Err(error),
            },
        }
    }

    /// Renews the leader's Lease, last stored as `lease`. When another
    /// write came in between (a `409`), reads it again: still ours (a
    /// label edited, say), it renews over that version; anyone else's, or
    /// gone, the leadership is lost.
    pub(super) async fn renew(&self, lease: &Lease) -> kube::Result<Renewal> {
        let error = match self.write_claim(lease.clone()).await {
            Ok(lease) => return Ok(Renewal::Renewed(Box::new(lease))),
            Err(error) => error,
        };
        match status_code(&error) {
            // Deleted (the API server usually answers a conditional
            // replace of a deleted Lease with a 409, read below): another
            // candidate may create it at once.
            Some(404) => return Ok(Renewal::Taken(None)),
            Some(409) => {}
            _ => return Err(error),
        }
        let Some(current) = self.get().await? else {
            return Ok(Renewal::Taken(None));
        };
        match record::holder(current.spec.as_ref()) {
            Some(holder) if holder == self.identity => {
                let lease = self.write_claim(current).await?;
                Ok(Renewal::Renewed(Box::new(lease)))
            }
            holder => Ok(Renewal::Taken(holder.map(str::to_owned))),
        }
    }

    /// Releases the Lease if this candidate holds it, so that the next
    /// candidate takes it at once; `Ok(false)` when a concurrent write
    /// came first (read again and retry).
    pub(super) async fn release(&self) -> kube::Result<bool> {
        let Some(mut lease) = self.get().await? else {
            return Ok(true);
        };
        let Some(spec) = lease.spec.as_ref() else {
            return Ok(true);
        };
        if record::holder(Some(spec)) != Some(self.identity.as_str()) {
            return Ok(true);
        }
        lease.spec = Some(record::released(spec, Timestamp::now()));
        match self.replace(&lease).await {
            Ok(_) => Ok(true),
            Err(error) if status_code(&error) == Some(409) => Ok(false),
            Err(error) if status_code(&error) == Some(404) => Ok(true),
            Err(error) => Err(error),
        }
    }

    /// Releases `lease` over the version it was stored at; a concurrent
    /// write (`409`) or a deleted Lease (`404`) leaves it be.
    pub(super) async fn release_over(&self, lease: &Lease) -> kube::Result<()> {
        let mut released = lease.clone();
        let spec = lease.spec.clone().unwrap_or_default();
        released.spec = Some(record::released(&spec, Timestamp::now()));
        match self.replace(&released).await {
            Err(error) if matches!(status_code(&error), Some(404 | 409)) => Ok(()),
            result => result.map(drop),
        }
    }

    /// Writes `lease` back with this candidate as its holder, over the
    /// version it was read at.
    async fn write_claim(&self, mut lease: Lease) -> kube::Result<Lease> {
        lease.spec = Some(record::claimed(
            lease.spec.as_ref(),
            &self.identity,
            self.lease_seconds,
            Timestamp::now(),
        ));
        self.replace(&lease).await
    }

    async fn replace(&self, lease: &Lease) -> kube::Result<Lease> {
        // `metadata.resourceVersion` (the version read) makes the replace
        // conditional.
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }

    /// Creates the Lease with this candidate as its first holder.
    async fn create(&self) -> kube::Result<Attempt> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(self.labels.clone()).filter(|labels| !labels.is_empty()),
                ..ObjectMeta::default()
            },
            spec: Some(record::claimed(
                None,
                &self.identity,
                self.lease_seconds,
                Timestamp::now(),
            )),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(lease) => Ok(Attempt::Acquired(Box::new(lease))),
            Err(error) if status_code(&error) == Some(409) => Ok(Attempt::Contended),
            Err(error) => Err(error),
        }
    }
}
