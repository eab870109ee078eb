//! The leader's renewals: every retry period, until the local deadline
//! passes, the Lease is taken, or the leadership ends.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::lock::{LeaseLock, Renewal};
use super::{Phase, Term};
use crate::client::FencingToken;
use crate::election::ElectionConfig;

/// Why a leadership ended in the renewals.
enum End {
    /// The local deadline passed without a successful renewal.
    Overdue,
    /// Another candidate holds the Lease (`None`: it is gone).
    Taken(Option<String>),
}

/// Renews `lease` (as last stored) every retry period while `term` leads
/// with `token`; publishes each successful renewal's send time. Ends the
/// leadership when a renewal is overdue or the Lease was taken.
pub(super) async fn keep(
    lock: LeaseLock,
    config: ElectionConfig,
    term: Arc<watch::Sender<Term>>,
    mut lease: Lease,
    token: FencingToken,
) {
    let period = config.retry_period();
    let mut tick = tokio::time::interval_at(crate::time::deadline(Instant::now(), period), period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = loop {
        tick.tick().await;
        let current = *term.borrow();
        if current.phase != Phase::Leading(token) {
            // Resigned, or lost (and noticed by `lost`).
            return;
        }
        let deadline = current.deadline(&config);
        let sent = Instant::now();
        if sent >= deadline {
            break End::Overdue;
        }
        match tokio::time::timeout_at(deadline, lock.renew(&lease)).await {
            Ok(Ok(Renewal::Renewed(stored))) => {
                lease = *stored;
                // Silently: `lost` reads the new deadline when its timer
                // fires, no wake-up needed.
                term.send_if_modified(|term| {
                    if term.phase == Phase::Leading(token) {
                        term.renewed = sent;
                    }
                    false
                });
            }
            Ok(Ok(Renewal::Taken(holder))) => break End::Taken(holder),
            Ok(Err(error)) => {
                tracing::debug!(election = %lock.name, %error, "renewing the Lease failed, retrying");
            }
            Err(_) => break End::Overdue,
        }
    };
    finish(&lock, &config, &term, token, end, &lease).await;
}

/// Ends the leadership of `token` for `end`; an overdue Lease is released
/// (best effort), so that a standby need not wait for it to expire.
async fn finish(
    lock: &LeaseLock,
    config: &ElectionConfig,
    term: &watch::Sender<Term>,
    token: FencingToken,
    end: End,
    lease: &Lease,
) {
    term.send_if_modified(|term| {
        let leading = term.phase == Phase::Leading(token);
        if leading {
            term.phase = Phase::Lost;
        }
        leading
    });
    match end {
        End::Taken(holder) => tracing::warn!(
            election = %lock.name,
            holder = holder.as_deref().unwrap_or("(none)"),
            "leadership lost: the Lease is held by another candidate or gone"
        ),
        End::Overdue => {
            tracing::warn!(election = %lock.name, "leadership lost: renewing the Lease is overdue");
            // Over the version last stored only: if anything wrote since
            // (a late renewal, a new term), the release is refused.
            let release = lock.release_over(lease);
            if let Ok(Err(error)) = tokio::time::timeout(config.renew_deadline(), release).await {
                tracing::debug!(election = %lock.name, %error, "releasing the overdue Lease failed");
            }
        }
    }
}
