//! The observer: starts the cluster and the replicas, runs the rounds,
//! and checks the run against etcd's history and the replicas' logs.

use std::path::Path;
use std::time::Duration;

use crate::chaos_history::History;
use crate::chaos_log::parse_logs;
use crate::chaos_replica::{items, shards};
use crate::chaos_world::{Process, Rounds, check, churn, converge, revision_now, seed};
use crate::disruptions::{Lab, round};
use crate::members::{Member, ready};
use crate::netns::{Host, Network};
use crate::{HOSTS, IDS, KEYS, replica_command, timing};

/// Items changed every 20 ms meanwhile, until a round converges.
const CHURN: usize = 5;

/// Starts the members, seeds the items, starts the replicas and waits for
/// the first sync; returns the lab and the history's follower.
async fn start<'a>(network: &'a Network, dir: &Path, lives: &Path) -> (Lab<'a>, History) {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let hosts: Vec<Host> = HOSTS.iter().map(|h| network.host(h).clone()).collect();
    let mut members = Member::all(&hosts, dir, &logs);
    members.iter_mut().for_each(Member::start);
    // The observer's member is never cut, frozen or killed: the history's
    // watch and the checks read through it.
    let mut kv = ready(&members[2].endpoint()).await;
    let seeded = seed(&mut kv, KEYS).await;
    let history = History::follow(kv.clone(), "/chaos/", seeded + 1, shards());
    let mut replicas: Vec<Process> = IDS
        .iter()
        .map(|id| Process::new(id, lives.to_owned()))
        .collect();
    for (replica, host) in replicas.iter_mut().zip(&hosts) {
        replica.start(replica_command(host));
    }
    let items = items(kv.clone()).client();
    let first = converge(&mut kv, &items, "the first sync").await;
    eprintln!("all {KEYS} keys converged {first:?} after the start");
    let lab = Lab {
        network,
        disks: dir.to_owned(),
        members,
        replicas,
        kv,
        items,
        collateral: Vec::new(),
    };
    (lab, history)
}

pub(crate) async fn run(network: &Network, dir: &Path) {
    let rounds: usize = std::env::var("TEND_CLUSTER_ROUNDS").map_or(12, |r| r.parse().unwrap());
    let lives = dir.join("lives");
    std::fs::create_dir_all(&lives).unwrap();
    let (mut lab, history) = start(network, dir, &lives).await;
    let mut rng: u64 = 0x5eed_c1a5;
    let (gate, churning) = churn(lab.kv.clone(), rng ^ 0xc4a5, CHURN, KEYS);
    let mut measured = Rounds::default();
    for n in 0..rounds {
        round(&mut lab, n, &mut rng, &gate, &mut measured).await;
    }
    churning.abort();
    for replica in &mut lab.replicas {
        if let Some(death) = replica.has_exited() {
            lab.collateral
                .push(format!("after the last round: {}", replica.id));
            measured.deaths.push(death);
        }
    }
    measured.deaths.extend(
        lab.replicas
            .iter_mut()
            .filter(|r| r.is_started())
            .map(Process::kill),
    );
    let end = revision_now(&mut lab.kv).await;
    let history = history.until(end).await;
    let reconciles = parse_logs(&lives, &measured.deaths);
    // Counted from the disruption, or from the next election when it cost
    // the cluster its leader: a lease expires a TTL after its last renewal,
    // or a TTL and an election timeout after a new leader took over (it
    // gives every lease its whole TTL again); the rest is room for a
    // loaded machine.
    let bound = timing().lease() * 2 + Duration::from_secs(3);
    let collateral = &lab.collateral;
    eprintln!(
        "replicas besides the rounds' victims that lost their membership: {} ({collateral:?})",
        collateral.len()
    );
    check(rounds, &reconciles, &history, measured, bound);
    // A lost leader costs the others an election (about 1.5 s here), which
    // their 3 s local deadline rides out.
    assert!(
        collateral.is_empty(),
        "replicas lost their membership to a fault on another host"
    );
}
