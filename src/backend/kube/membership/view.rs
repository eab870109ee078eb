//! The group's Leases, followed by an informer of their own: the live
//! members, and a counter of changes that waiting acquires wake on.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::{GROUP_LABEL, KubeMembership};
use crate::election::ElectionConfig;
use crate::informer::{Event, Informer};
use crate::kube::KubeSource;
use crate::kube::election::record::{self, Observed, Verdict};
use crate::object::Object;
use crate::shard::MemberId;

/// When a member Lease's version was first seen.
pub(super) type Seen = Observed;

/// What the membership's handles share of the view.
pub(super) struct View {
    members: Arc<watch::Sender<Vec<MemberId>>>,
    /// Every change of the group's Leases (the live set is counted again).
    changes: Arc<watch::Sender<u64>>,
    /// A Lease's holder changed, or a Lease came or went: what waiting
    /// acquires wake on (a renewal does not wake them).
    holders: Arc<watch::Sender<u64>>,
    /// The follower task, started by the first join, `members` or acquire.
    task: Mutex<Option<AbortOnDropHandle<()>>>,
}

impl View {
    pub(super) fn new() -> Self {
        Self {
            members: Arc::new(watch::Sender::new(Vec::new())),
            changes: Arc::new(watch::Sender::new(0)),
            holders: Arc::new(watch::Sender::new(0)),
            task: Mutex::new(None),
        }
    }

    pub(super) fn members(&self) -> watch::Receiver<Vec<MemberId>> {
        self.members.subscribe()
    }

    /// A receiver that sees every later change of a Lease's holder.
    pub(super) fn holders(&self) -> watch::Receiver<u64> {
        self.holders.subscribe()
    }

    /// Tells waiters (and the members' count) that something changed.
    pub(super) fn changed(&self) {
        bump(&self.changes);
        bump(&self.holders);
    }
}

fn bump(counter: &watch::Sender<u64>) {
    counter.send_modify(|n| *n = n.wrapping_add(1));
}

/// Whether `event` changed who holds a Lease (or which Leases exist).
fn moves_a_holder(event: &Event<Lease>) -> bool {
    let holder = |lease: &Lease| record::holder(lease.spec.as_ref()).map(str::to_owned);
    match event {
        Event::Applied { old, new } => old.as_deref().map(holder) != Some(holder(new)),
        Event::Initial(_) | Event::Deleted(_) => true,
        Event::Resync(_) => false,
    }
}

impl KubeMembership {
    /// Starts following the group's Leases, once (needs a runtime; without
    /// one, the next call starts it).
    pub(super) fn start_view(&self) {
        let mut task = self.inner.view.task.lock();
        if task.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let selector = format!("{GROUP_LABEL}={}", self.inner.group);
        let source =
            KubeSource::<Lease>::namespaced(self.inner.client.clone(), &self.inner.namespace)
                .labels(&selector)
                .named(format!("{}-membership", self.inner.group));
        let follower = Follower {
            prefix: self.member_lease(""),
            observed: Arc::clone(&self.inner.observed),
            config: self.inner.config,
            members: Arc::clone(&self.inner.view.members),
            changes: Arc::clone(&self.inner.view.changes),
            holders: Arc::clone(&self.inner.view.holders),
        };
        *task = Some(AbortOnDropHandle::new(runtime.spawn(follower.run(source))));
    }
}

/// The task that follows the Leases (holding no handle of the membership,
/// so that dropping the last one stops it).
struct Follower {
    /// `{group}-member-`: the member Leases' names start with it.
    prefix: String,
    /// The membership's observations, shared with its acquires.
    observed: Arc<Mutex<HashMap<String, Observed>>>,
    config: ElectionConfig,
    members: Arc<watch::Sender<Vec<MemberId>>>,
    changes: Arc<watch::Sender<u64>>,
    holders: Arc<watch::Sender<u64>>,
}

impl Follower {
    async fn run(self, source: KubeSource<Lease>) {
        let informer = match Informer::builder(source).build() {
            Ok(informer) => informer,
            Err(error) => {
                tracing::error!(%error, "cannot follow the membership's Leases");
                return;
            }
        };
        let (changes, holders) = (Arc::clone(&self.changes), Arc::clone(&self.holders));
        let _subscription = informer.subscribe(move |event| {
            bump(&changes);
            if moves_a_holder(event) {
                bump(&holders);
            }
        });
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        tokio::select! {
            result = informer.run(stop) => {
                if let Err(error) = result {
                    tracing::error!(%error, "following the membership's Leases ended");
                }
            }
            () = self.count(&informer) => {}
        }
    }

    /// Publishes the live members on every change, and when the first of
    /// them would expire.
    async fn count(&self, informer: &Informer<Lease>) {
        let mut changes = self.changes.subscribe();
        loop {
            let next = self.publish(informer, Instant::now());
            let wake = next.unwrap_or_else(|| {
                crate::time::deadline(Instant::now(), self.config.retry_period())
            });
            tokio::select! {
                changed = changes.changed() => if changed.is_err() {
                    return;
                },
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// The members whose Lease names a session renewed within its
    /// duration (as seen at `now`), published if they changed; returns when
    /// the first of them expires unless renewed.
    fn publish(&self, informer: &Informer<Lease>, now: Instant) -> Option<Instant> {
        let mut live = Vec::new();
        let mut next: Option<Instant> = None;
        let mut seen = self.observed.lock();
        for lease in informer.cache().list() {
            let name = lease.key().name;
            let Some(id) = name.strip_prefix(&self.prefix) else {
                continue;
            };
            let observed = Observed::after(seen.remove(&name), &lease, now);
            if let Verdict::Held { until, .. } =
                record::verdict(lease.spec.as_ref(), "", &observed, now)
            {
                live.push(MemberId::from(id.to_owned()));
                next = Some(next.map_or(until, |next| next.min(until)));
            }
            seen.insert(name, observed);
        }
        drop(seen);
        live.sort();
        self.members.send_if_modified(|members| {
            let changed = *members != live;
            if changed {
                *members = live;
            }
            changed
        });
        next
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    use super::*;

    fn lease(holder: Option<&str>, version: &str) -> Arc<Lease> {
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some(version.to_owned());
        lease.spec = Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            ..LeaseSpec::default()
        });
        Arc::new(lease)
    }

    #[test]
    fn a_renewal_wakes_no_acquire_and_a_new_holder_does() {
        let applied = |old: Option<Arc<Lease>>, new| Event::Applied { old, new };
        let renewed = applied(Some(lease(Some("a/1"), "5")), lease(Some("a/1"), "6"));
        assert!(!moves_a_holder(&renewed));
        let taken = applied(Some(lease(Some("a/1"), "5")), lease(Some("b/2"), "6"));
        assert!(moves_a_holder(&taken));
        let released = applied(Some(lease(Some("a/1"), "5")), lease(None, "6"));
        assert!(moves_a_holder(&released));
        assert!(moves_a_holder(&applied(None, lease(Some("a/1"), "5"))));
        assert!(moves_a_holder(&Event::Deleted(lease(Some("a/1"), "5"))));
        assert!(moves_a_holder(&Event::Initial(lease(None, "5"))));
        assert!(!moves_a_holder(&Event::Resync(lease(Some("a/1"), "5"))));
    }
}
