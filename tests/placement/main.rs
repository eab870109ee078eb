//! Placement per runnable: one manager with sharded, leader-only and
//! everywhere runnables; warm standbys; leader-only tasks; the placements
//! a manager cannot honour refused at registration.

#[path = "../support/looks.rs"]
mod looks;
#[path = "../support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::Informer;
use tend::client::FencingToken;
use tend::controller::{Action, Context, Controller, Environment, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryMembershipGroup;
use tend::memory::MemoryStore;
use tend::placement::{Placement, Sharding};
use tend::shard::ShardCount;
use tend::testing::Harness;
use tokio_util::sync::CancellationToken;

use widgets::{Widget, eventually, widgets, within};

mod leadership;
mod mixed;
mod refusals;
mod scoped_caches;
mod sharding;

const LIMIT: Duration = Duration::from_secs(60);

/// One reconcile: replica, controller, key, token, and whether it saw a
/// deleted object's last state.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    replica: &'static str,
    controller: &'static str,
    key: String,
    token: Option<FencingToken>,
    deleted: bool,
}

type Log = Arc<Mutex<Vec<Seen>>>;

#[derive(Clone)]
struct Recorder {
    replica: &'static str,
    controller: &'static str,
    log: Log,
}

impl Reconciler<Widget> for Recorder {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        self.log.lock().push(Seen {
            replica: self.replica,
            controller: self.controller,
            key: ctx.key().clone(),
            token: ctx.fencing_token(),
            deleted: ctx.deleted().is_some(),
        });
        Ok(Action::Done)
    }
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("w{i:03}")).collect()
}

fn store_of(count: usize) -> MemoryStore<Widget> {
    let names = names(count);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    widgets(&refs)
}

/// The reconciles of `controller` on `replica` so far, as keys.
fn keys(log: &Log, replica: &str, controller: &str) -> Vec<String> {
    log.lock()
        .iter()
        .filter(|s| s.replica == replica && s.controller == controller)
        .map(|s| s.key.clone())
        .collect()
}

struct Replica {
    stop: CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

impl Replica {
    async fn stop(self) {
        self.stop.cancel();
        within("the replica to stop", LIMIT, self.run)
            .await
            .expect("not panicked")
            .expect("a clean stop");
    }
}

/// A manager with a membership and an election, running a sharded
/// controller, a leader-only one and one everywhere over `store`.
fn mixed(
    replica: &'static str,
    store: &MemoryStore<Widget>,
    group: &MemoryMembershipGroup,
    election: &MemoryElectionGroup,
    log: &Log,
) -> Replica {
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(group.member(replica), group.shard_count())
        .leader_election(election.candidate())
        .shard_handover_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .expect("registered");
    for (controller, placement) in [
        ("sharded", Placement::Sharded),
        ("leader", Placement::Leader),
        ("everywhere", Placement::Everywhere),
    ] {
        let recorder = Recorder {
            replica,
            controller,
            log: Arc::clone(log),
        };
        let built = manager
            .controller(controller, &informer, recorder)
            .build()
            .expect("valid");
        manager.add_controller_on(built, placement).expect("placed");
    }
    let stop = manager.shutdown_token();
    Replica {
        stop,
        run: tokio::spawn(manager.run()),
    }
}
