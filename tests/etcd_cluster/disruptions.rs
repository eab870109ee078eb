//! The disruptions of a round, on one host: its member (cut off, killed, its
//! disk frozen) or its replica (killed, stopped).

use std::path::PathBuf;
use std::time::Duration;

use tend::client::Client;
use tend::etcd::etcd_client;
use tokio::time::Instant;

use crate::chaos_log::Death;
use crate::chaos_replica::Item;
use crate::chaos_world::{
    Process, Rounds, bump, next_random, reowned, shards_of, share, signal, unconverged,
};
use crate::frozen_disk::{freeze, thaw};
use crate::members::{Member, elected_besides, lead, leading, ready};
use crate::netns::Network;
use crate::{HOSTS, IDS, KEYS, replica_command};

/// Items whose desired state changes just before each disruption.
const BUMPS: usize = 60;
/// How long a replica may take to stop once it lost its membership.
const STOP: Duration = Duration::from_secs(15);
/// How long a killed member stays down.
const DOWN: Duration = Duration::from_secs(3);

/// What a round does, to the member or the replica of one host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Disruption {
    /// A follower member's host cut off: the member loses quorum while its
    /// replica still holds a lease.
    CutFollower,
    /// The etcd leader moved to the host, then the host cut off.
    CutLeader,
    /// A follower member's disk frozen until the replica's shards are
    /// owned by others. (Not the leader's: etcd 3.4.23's deposed leader,
    /// thawed, revokes the leases it saw expire while frozen, the others'
    /// included, which ends their ownership before they can know.)
    FrozenDisk,
    /// The member killed (SIGKILL), started again after 3 s.
    MemberRestart,
    /// The replica stopped cleanly (SIGTERM): a handover.
    Stop,
    /// The replica killed (SIGKILL).
    KillReplica,
}

impl Disruption {
    fn of_round(round: usize) -> Self {
        match round % 6 {
            0 => Self::CutFollower,
            1 => Self::CutLeader,
            2 => Self::FrozenDisk,
            3 => Self::MemberRestart,
            4 => Self::Stop,
            _ => Self::KillReplica,
        }
    }

    /// Whether it falls on a member (never the observer's, the third).
    fn on_member(self) -> bool {
        !matches!(self, Self::Stop | Self::KillReplica)
    }
}

/// The cluster, the replicas and the observer's clients.
pub(crate) struct Lab<'a> {
    pub(crate) network: &'a Network,
    /// Where the hosts' disks are mounted.
    pub(crate) disks: PathBuf,
    pub(crate) members: Vec<Member>,
    pub(crate) replicas: Vec<Process>,
    pub(crate) kv: etcd_client::Client,
    pub(crate) items: Client<Item>,
    /// When a replica other than the victim lost its membership, one per
    /// loss.
    pub(crate) collateral: Vec<String>,
}

/// One round: a burst of changes, a disruption on one host under churn, the
/// host healed and its replica started again, its share back; then, the
/// churn held, every key converged.
pub(crate) async fn round(
    lab: &mut Lab<'_>,
    n: usize,
    rng: &mut u64,
    gate: &tokio::sync::Mutex<()>,
    measured: &mut Rounds,
) {
    // A replica that lost its membership since the last round settled.
    restart(lab, measured, &format!("before round {n}"));
    bump(&mut lab.kv, rng, BUMPS, KEYS).await;
    // Not a wait for anything: the disruption should find the burst's
    // reconciles in flight.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let disruption = Disruption::of_round(n);
    let hosts = if disruption.on_member() { 2 } else { 3 };
    let victim = usize::try_from(next_random(rng) % hosts).unwrap();
    eprintln!(
        "{}: {disruption:?} on {}",
        crate::chaos_replica::wall_ns(),
        HOSTS[victim]
    );
    let (death, took) = inflict(lab, disruption, victim).await;
    eprintln!(
        "round {n} ({disruption:?} on {}): {} shards owned again, the last after {:?}",
        HOSTS[victim],
        took.len(),
        took.iter().max().copied().unwrap_or_default()
    );
    measured.deaths.push(death);
    if disruption == Disruption::Stop {
        measured.handed.extend(took);
    } else {
        measured.unowned.extend(took);
    }
    let _held = gate.lock().await;
    let what = format!("round {n} ({disruption:?} on {})", HOSTS[victim]);
    let settled = settle(lab, measured, &what).await;
    eprintln!("{what}: converged {settled:?} after the disruption was healed");
}

/// Waits (bounded) until every replica owns its share and every key is
/// converged, starting again, as a supervisor would, the victim and any
/// other replica that lost its membership meanwhile (recorded).
async fn settle(lab: &mut Lab<'_>, measured: &mut Rounds, what: &str) -> Duration {
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        restart(lab, measured, what);
        let mut shared = true;
        for id in IDS {
            shared &= shards_of(&mut lab.kv, id).await.len() == share(id, &IDS);
        }
        let (bad, unowned) = unconverged(&mut lab.kv, &lab.items).await;
        if shared && bad == 0 && unowned == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {bad} keys not converged, {unowned} shards unowned, \
             shares {}complete after {limit:?}",
            if shared { "" } else { "in" }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts every replica that is not running: the victim, and any other
/// that lost its membership meanwhile (counted), as a supervisor would.
pub(crate) fn restart(lab: &mut Lab<'_>, measured: &mut Rounds, what: &str) {
    for (replica, member) in lab.replicas.iter_mut().zip(&lab.members) {
        if let Some(death) = replica.has_exited() {
            eprintln!("{what}: {} lost its membership too", replica.id);
            measured.deaths.push(death);
            lab.collateral.push(format!("{what}: {}", replica.id));
        }
        if !replica.is_started() {
            replica.start(replica_command(&member.host));
        }
    }
}

/// Inflicts `disruption` on host `victim` and heals it. Every disruption ends the
/// host's replica (killed, stopped, or exited on losing its membership);
/// returns its death and how long each of its shards stayed unowned (or
/// took to be handed over), counted from the disruption or, when it cost
/// the cluster its leader, from the next leader's election: no replica can
/// take a shard over while etcd has no leader, and how long an election
/// takes is etcd's (a split vote, a slow machine), not tend's.
async fn inflict(
    lab: &mut Lab<'_>,
    disruption: Disruption,
    victim: usize,
) -> (Death, Vec<Duration>) {
    let id = IDS[victim];
    let theirs = shards_of(&mut lab.kv, id).await;
    let host = lab.members[victim].host.clone();
    let since = Instant::now();
    let (death, took) = match disruption {
        Disruption::CutFollower | Disruption::CutLeader => {
            let leader = if disruption == Disruption::CutLeader {
                victim
            } else {
                2
            };
            lead(&mut lab.kv, HOSTS[leader], &lab.members).await;
            lab.network.cut(&host);
            let from = counted_from(lab, leader == victim, victim, since).await;
            let took = reowned(&mut lab.kv, id, theirs, from).await;
            let death = lab.replicas[victim].exited(STOP).await;
            lab.network.heal(&host);
            (death, took)
        }
        Disruption::FrozenDisk => {
            lead(&mut lab.kv, HOSTS[2], &lab.members).await;
            let disk = lab.disks.join(&host.name);
            freeze(&disk);
            let took = reowned(&mut lab.kv, id, theirs, since).await;
            let death = lab.replicas[victim].exited(STOP).await;
            thaw(&disk);
            (death, took)
        }
        Disruption::MemberRestart => {
            let led = leading(&mut lab.kv).await.as_deref() == Some(HOSTS[victim]);
            lab.members[victim].kill();
            let from = counted_from(lab, led, victim, since).await;
            let took = reowned(&mut lab.kv, id, theirs, from).await;
            let death = lab.replicas[victim].exited(STOP).await;
            tokio::time::sleep(DOWN.saturating_sub(since.elapsed())).await;
            lab.members[victim].start();
            (death, took)
        }
        Disruption::Stop => {
            signal(lab.replicas[victim].child(), "-TERM");
            let death = lab.replicas[victim].exited(STOP).await;
            (death, reowned(&mut lab.kv, id, theirs, since).await)
        }
        Disruption::KillReplica => {
            let death = lab.replicas[victim].kill();
            (death, reowned(&mut lab.kv, id, theirs, since).await)
        }
    };
    // The host's member serves again before its replica starts.
    drop(ready(&lab.members[victim].endpoint()).await);
    (death, took)
}

/// When a round's unowned time starts: at the disruption, or, when `led`
/// (the victim's member was the leader), once another member is elected.
async fn counted_from(lab: &mut Lab<'_>, led: bool, victim: usize, since: Instant) -> Instant {
    if !led {
        return since;
    }
    let elected = elected_besides(&mut lab.kv, HOSTS[victim]).await;
    eprintln!(
        "{}'s member led: the next leader was elected {:?} after the disruption",
        HOSTS[victim],
        elected - since
    );
    elected
}
