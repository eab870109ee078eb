//! The campaign: read the Lease every retry period until this candidate
//! takes it, then start the renewals; and the release on resign.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::lock::Attempt;
use super::{KubeElection, Phase, RequestError, Term, renew};
use crate::client::FencingToken;
use crate::election::ElectionError;
use crate::kube::revision_of;

/// Returns a campaign dropped before it won to idle.
struct CampaignGuard<'a> {
    election: &'a KubeElection,
    armed: bool,
}

impl Drop for CampaignGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.election.inner.term.send_if_modified(|term| {
                let campaigning = term.phase == Phase::Campaigning;
                if campaigning {
                    term.phase = Phase::Idle;
                }
                campaigning
            });
        }
    }
}

impl KubeElection {
    /// Campaigns until elected: polls every retry period (±10 %), retries
    /// transient failures, fails on a refusal.
    pub(super) async fn campaign_until_elected(&self) -> Result<FencingToken, ElectionError> {
        if let Some(token) = self.token() {
            return Ok(token);
        }
        let inner = &self.inner;
        inner
            .term
            .send_modify(|term| term.phase = Phase::Campaigning);
        let mut guard = CampaignGuard {
            election: self,
            armed: true,
        };
        let mut observed = None;
        loop {
            let sent = Instant::now();
            let attempt = self.timed(inner.lock.try_acquire(&mut observed)).await;
            match attempt.and_then(|attempt| self.outcome(attempt, sent)) {
                Ok(Some(token)) => {
                    guard.armed = false;
                    tracing::info!(election = %inner.lock.name, identity = %inner.lock.identity, %token, "elected");
                    return Ok(token);
                }
                Ok(None) => {}
                Err(error) if error.is_refusal() => return Err(self.backend(error)),
                Err(error) => tracing::warn!(
                    election = %inner.lock.name,
                    error = %crate::error::error_chain(&error),
                    "campaign failed, retrying"
                ),
            }
            let pause = crate::time::jittered(inner.config.retry_period(), fastrand::f64());
            tokio::time::sleep(pause).await;
        }
    }

    /// The token when `attempt` (whose request was sent at `sent`) won.
    fn outcome(
        &self,
        attempt: Attempt,
        sent: Instant,
    ) -> Result<Option<FencingToken>, RequestError> {
        match attempt {
            Attempt::Acquired(lease) => self.lead(*lease, sent).map(Some),
            Attempt::Held { holder, until } => {
                tracing::debug!(
                    election = %self.inner.lock.name,
                    %holder,
                    expires_in = ?until.saturating_duration_since(Instant::now()),
                    "the Lease is held"
                );
                Ok(None)
            }
            Attempt::Contended => Ok(None),
        }
    }

    /// Starts leading on `lease`, as this candidate's write stored it:
    /// its `resourceVersion` is the token, the renewals start.
    fn lead(&self, lease: Lease, sent: Instant) -> Result<FencingToken, RequestError> {
        let inner = &self.inner;
        // The Lease names this candidate now, whatever follows.
        inner.claimed.store(true, Ordering::SeqCst);
        let token = FencingToken::new(revision_of(&lease)?.get());
        inner.term.send_replace(Term {
            phase: Phase::Leading(token),
            renewed: sent,
        });
        let keeper = tokio::spawn(renew::keep(
            inner.lock.clone(),
            inner.config,
            Arc::clone(&inner.term),
            lease,
            token,
        ));
        *inner.keeper.lock() = Some(AbortOnDropHandle::new(keeper));
        Ok(token)
    }

    /// Stops the renewals and, if the Lease may name this candidate,
    /// releases it; within the renew deadline.
    pub(super) async fn release(&self) -> Result<(), RequestError> {
        let inner = &self.inner;
        drop(inner.keeper.lock().take());
        inner.term.send_modify(|term| term.phase = Phase::Idle);
        if !inner.claimed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let deadline = crate::time::deadline(Instant::now(), inner.config.renew_deadline());
        loop {
            match tokio::time::timeout_at(deadline, inner.lock.release()).await {
                Ok(Ok(true)) => break,
                // Another write came in between: read again.
                Ok(Ok(false)) => {}
                Ok(Err(error)) => return Err(error.into()),
                Err(_) => return Err(RequestError::TimedOut),
            }
        }
        inner.claimed.store(false, Ordering::SeqCst);
        tracing::info!(election = %inner.lock.name, identity = %inner.lock.identity, "resigned");
        Ok(())
    }
}
