//! The rounds: what fails, how it heals, and what each measured.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use tokio::task::JoinHandle;

use super::*;
use crate::dependents::Duplicates;

/// What a round does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Disruption {
    /// The API server SIGKILLed, started again 2 s later.
    Restart,
    /// The replicas cut off while the parents change, then etcd compacted
    /// past what they saw and the API server restarted (its watch cache
    /// starts afresh): every watch resuming from before ends with
    /// `410 Gone`, and its informer lists again.
    Compaction,
    /// The API server blackholed for every replica for twice the lease
    /// (their requests held, and delivered when healed): nobody leads.
    Blackhole,
    /// The leader's way to the API server blackholed for twice the lease:
    /// the standby takes over, and the old leader's held requests arrive
    /// late.
    LeaderCut,
}

impl Disruption {
    fn of_round(round: usize) -> Self {
        match round % 4 {
            0 => Self::Restart,
            1 => Self::Compaction,
            2 => Self::Blackhole,
            _ => Self::LeaderCut,
        }
    }
}

/// What the rounds measured.
#[derive(Default)]
pub(crate) struct Measured {
    /// From each heal until every parent had what it wants.
    recovered: Vec<Duration>,
    relists: BTreeMap<Disruption, u64>,
    /// Dependents of two leadership terms at once, by the round they
    /// showed in.
    across_terms: BTreeMap<Disruption, usize>,
}

impl Measured {
    /// Dependents of two terms at once in rounds that did not cut the
    /// leader off from the API server (where its held creates land late).
    pub(crate) fn across_terms_outside_cuts(&self) -> usize {
        let cut = [Disruption::Blackhole, Disruption::LeaderCut];
        let outside = self.across_terms.iter().filter(|(d, _)| !cut.contains(d));
        outside.map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Measured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sorted = self.recovered.clone();
        sorted.sort();
        let at = |p: f64| {
            let rank = (p * sorted.len().saturating_sub(1) as f64).round() as usize;
            sorted.get(rank).copied().unwrap_or_default()
        };
        write!(
            f,
            "recovered after the heal p50 {:?}, p99 {:?}; relists {:?}; dependents of two terms at once {:?}",
            at(0.5),
            at(0.99),
            self.relists,
            self.across_terms
        )
    }
}

/// The current leader's index in `IDS`, from the Lease.
async fn leader(world: &World) -> usize {
    let api: Api<Lease> = Api::namespaced(world.admin.clone(), &world.namespace);
    let lease = within("reading the Lease", Duration::from_secs(20), api.get(LEASE))
        .await
        .expect("the Lease exists");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    IDS.iter()
        .position(|id| *id == holder)
        .unwrap_or_else(|| panic!("the Lease's holder {holder:?} is a replica"))
}

async fn disrupt(world: &World, disruption: Disruption) {
    let plane = &world.plane;
    match disruption {
        Disruption::Restart => {
            plane.kill_apiserver();
            tokio::time::sleep(Duration::from_secs(2)).await;
            plane
                .start_apiserver()
                .await
                .expect("the API server starts again");
        }
        Disruption::Compaction => {
            world.proxies.iter().for_each(|p| p.blackhole(true));
            // The churn writes meanwhile: the watches fall behind.
            tokio::time::sleep(Duration::from_secs(1)).await;
            plane.compact_etcd().await.expect("etcd compacts");
            plane
                .restart_apiserver()
                .await
                .expect("the API server starts again");
            world.proxies.iter().for_each(|p| p.blackhole(false));
        }
        Disruption::Blackhole => {
            world.proxies.iter().for_each(|p| p.blackhole(true));
            tokio::time::sleep(timing().lease() * 2).await;
            world.proxies.iter().for_each(|p| p.blackhole(false));
        }
        Disruption::LeaderCut => {
            let proxy = &world.proxies[leader(world).await];
            proxy.blackhole(true);
            tokio::time::sleep(timing().lease() * 2).await;
            proxy.blackhole(false);
        }
    }
}

/// Flips what 5 random parents want every 100 ms, each followed at once
/// by a second change, while the returned gate is not held; failed changes
/// (the API server down) are skipped.
fn churn(world: &World) -> (Arc<tokio::sync::Mutex<()>>, JoinHandle<()>) {
    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), &world.namespace);
    let parents = world.parents;
    let gate = Arc::new(tokio::sync::Mutex::new(()));
    let held = Arc::clone(&gate);
    let task = tokio::spawn(async move {
        loop {
            {
                let _open = held.lock().await;
                for _ in 0..5 {
                    let name = format!("p-{:05}", fastrand::usize(..parents));
                    let want = u8::from(fastrand::bool()).to_string();
                    let params = PatchParams::default();
                    let flip = serde_json::json!({ "data": { "want": want } });
                    let _ = api.patch(&name, &params, &Patch::Merge(&flip)).await;
                    // A second change at once: its reconcile follows the
                    // flip's, whose write the cache may not show yet.
                    let touch =
                        serde_json::json!({ "data": { "touched": fastrand::u32(..).to_string() } });
                    let _ = api.patch(&name, &params, &Patch::Merge(&touch)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (gate, task)
}

/// Runs `rounds` rounds under churn; after each, holds the churn until
/// every parent has what it wants.
pub(crate) async fn run(world: &mut World, rounds: usize, duplicates: &Duplicates) -> Measured {
    let (gate, churning) = churn(world);
    let mut measured = Measured::default();
    for n in 0..rounds {
        // Not a wait for anything: changes are in flight when it fails.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let disruption = Disruption::of_round(n);
        let before = world.relists();
        let (_, across_before) = duplicates.counts();
        disrupt(world, disruption).await;
        let healed = Instant::now();
        let _held = gate.lock().await;
        let what = format!("round {n} ({disruption:?})");
        converge(&world.admin, &world.namespace, &what).await;
        let recovered = healed.elapsed();
        let relists = world.relists() - before;
        let (same_term, across_terms) = duplicates.counts();
        eprintln!(
            "{what}: converged {recovered:?} after the heal, {relists} relists, \
             duplicates so far {same_term} in one term, {across_terms} across terms"
        );
        *measured.across_terms.entry(disruption).or_default() += across_terms - across_before;
        assert!(
            disruption != Disruption::Compaction || relists > 0,
            "{what}: no informer listed again after its watch expired"
        );
        measured.recovered.push(recovered);
        *measured.relists.entry(disruption).or_default() += relists;
    }
    churning.abort();
    measured
}
