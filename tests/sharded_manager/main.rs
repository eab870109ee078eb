//! The manager's sharding option on the in-process membership: several
//! replicas (managers) in one process share one memory store; each
//! reconciles only the keys of the shards it owns, with the shard's token,
//! and hands shards over without two replicas ever reconciling one key at
//! once.

#[path = "../support/http.rs"]
mod http;
#[path = "../support/wait.rs"]
mod wait;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::client::{Client, ClientError, FencingToken};
use tend::controller::{Action, Context, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::memory::MemoryMembershipGroup;
use tend::memory::MemoryStore;
use tend::shard::{Assignment, MemberId, Membership, ShardCount};
use tend::{CancellationToken, Informer, Revision};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wait::{eventually, within};

mod handover;
mod joins;
mod membership;
mod observability;

use handover::{join_while_held, moving_key};

const LIMIT: Duration = Duration::from_secs(120);
const KEYS: usize = 1000;

/// An item, stamped by the replica that reconciled it last.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    name: String,
    by: String,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// One reconcile, as the log records it.
#[derive(Debug, Clone)]
struct Record {
    replica: String,
    key: String,
    token: Option<FencingToken>,
    /// The shard's owner and token in the membership when it started.
    owner: Option<(MemberId, FencingToken)>,
    start: Instant,
    end: Instant,
    /// The reconcile was handed a deleted object's last state.
    deleted: bool,
}

type Log = Arc<Mutex<Vec<Record>>>;

/// Stamps each item with its replica's name through the reconcile's
/// (fenced) client, after a pause that leaves reconciles in flight.
struct Stamp {
    replica: String,
    group: MemoryMembershipGroup,
    log: Log,
}

impl Reconciler<Item> for Stamp {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let start = Instant::now();
        let shard = self.group.shard_count().shard_of(ctx.key());
        let owner = self.group.owner(shard);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let written = match ctx.object().filter(|item| item.by != self.replica) {
            Some(item) => {
                let client = ctx.client::<Item>().expect("a client for items");
                let stamped = Item {
                    by: self.replica.clone(),
                    ..Item::clone(item)
                };
                client.update(stamped).await.map(drop)
            }
            None => Ok(()),
        };
        // Logged however the write ended: a reconcile that ran counts.
        self.log.lock().push(Record {
            replica: self.replica.clone(),
            key: ctx.key().clone(),
            token: ctx.fencing_token(),
            owner,
            start,
            end: Instant::now(),
            deleted: ctx.deleted().is_some(),
        });
        match written {
            Ok(()) | Err(ClientError::Conflict { .. }) => Ok(Action::Done),
            Err(error) => Err(error),
        }
    }
}

struct Replica {
    stop: CancellationToken,
    run: JoinHandle<Result<(), ManagerError>>,
}

impl Replica {
    async fn stop(self) {
        self.stop.cancel();
        let stopped = within("the replica's stop", LIMIT, self.run).await;
        stopped.expect("not panicked").expect("a clean stop");
    }
}

fn items() -> MemoryStore<Item> {
    let store = MemoryStore::new("items");
    let client = store.client();
    for i in 0..KEYS {
        let item = Item {
            name: format!("item-{i}"),
            by: String::new(),
            version: Revision::ZERO,
        };
        futures::executor::block_on(client.create(item)).expect("a fresh name");
    }
    store
}

/// A sharded replica `name` of `group` over `store`, handing shards over
/// within `handover`, whose controller `controller` reconciles with
/// `reconciler` and writes through a client fenced by the shards' tokens.
fn sharded_with<R: Reconciler<Item>>(
    name: &str,
    (group, store): (&MemoryMembershipGroup, &MemoryStore<Item>),
    handover: Duration,
    (controller, reconciler): (&str, R),
) -> Manager {
    let member = group.member(name);
    let fenced = store.client_fenced_by(&member);
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(member, group.shard_count())
        .shard_handover_timeout(handover)
        .build()
        .expect("valid");
    let informer = manager
        .informer("items", || Informer::builder(store.clone()).build())
        .expect("registered");
    let controller = manager
        .controller(controller, &informer, reconciler)
        .client(fenced)
        .build()
        .expect("valid");
    manager.add_sharded_controller(controller).expect("added");
    manager
}

fn sharded(
    name: &str,
    group: &MemoryMembershipGroup,
    store: &MemoryStore<Item>,
    log: &Log,
) -> Manager {
    let stamp = Stamp {
        replica: name.to_owned(),
        group: group.clone(),
        log: Arc::clone(log),
    };
    let handover = Duration::from_secs(1);
    sharded_with(name, (group, store), handover, ("stamp", stamp))
}

fn start(manager: Manager) -> Replica {
    let stop = manager.shutdown_token();
    Replica {
        stop,
        run: tokio::spawn(manager.run()),
    }
}

/// Clears every item's stamp, so that every key is reconciled again.
async fn touch_all(store: &MemoryStore<Item>) {
    let client = store.client();
    for i in 0..KEYS {
        let key = format!("item-{i}");
        let item = store.get(&key).expect("exists");
        let cleared = Item {
            by: String::new(),
            ..Item::clone(&item)
        };
        client
            .update(cleared)
            .await
            .expect("no rival writer while touching");
    }
}

/// Every item is stamped by the owner of its shard among `members`.
fn converged(store: &MemoryStore<Item>, group: &MemoryMembershipGroup, members: &[&str]) -> bool {
    let assignment = Assignment::compute(members.iter().copied(), group.shard_count());
    (0..KEYS).all(|i| {
        let key = format!("item-{i}");
        let by = store.get(&key).map(|item| item.by);
        by.as_deref() == assignment.owner_of(&key).map(MemberId::as_str)
    })
}

/// Every reconcile ran on its shard's owner, with its token, and no two
/// reconciles of one key overlapped, across replicas.
fn check_log(log: &Log) {
    let log = log.lock();
    let mut by_key: HashMap<&str, Vec<&Record>> = HashMap::new();
    for record in log.iter() {
        let (owner, token) = record.owner.clone().expect("the shard had an owner");
        assert_eq!(
            owner.as_str(),
            record.replica,
            "{record:?} ran off its shard's owner"
        );
        assert_eq!(
            record.token,
            Some(token),
            "{record:?} ran without its shard's token"
        );
        by_key.entry(&record.key).or_default().push(record);
    }
    for (key, mut records) in by_key {
        records.sort_by_key(|r| r.start);
        for pair in records.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "reconciles of {key} overlapped: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}
