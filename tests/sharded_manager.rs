//! The manager's sharding option on the in-process membership: several
//! replicas (managers) in one process share one memory store; each
//! reconciles only the keys of the shards it owns, with the shard's token,
//! and hands shards over without two replicas ever reconciling one key at
//! once.

#[path = "support/http.rs"]
mod http;
#[path = "support/wait.rs"]
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

#[tokio::test(start_paused = true)]
async fn replicas_reconcile_only_their_shards_and_hand_them_over_on_leave_and_join() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(64).expect("valid"));
    let store = items();
    let log = Log::default();
    let mut replicas: HashMap<&str, Replica> = ["r0", "r1", "r2"]
        .into_iter()
        .map(|name| (name, start(sharded(name, &group, &store, &log))))
        .collect();
    eventually("every key stamped by its owner of three", LIMIT, || {
        converged(&store, &group, &["r0", "r1", "r2"])
    })
    .await;
    check_log(&log);

    // r1 leaves: its shards go to the others, only once it released them.
    let r1_tokens: Vec<FencingToken> = log
        .lock()
        .iter()
        .filter(|r| r.replica == "r1")
        .filter_map(|r| r.token)
        .collect();
    replicas.remove("r1").expect("running").stop().await;
    eventually("every key stamped by its owner of two", LIMIT, || {
        converged(&store, &group, &["r0", "r2"])
    })
    .await;
    check_log(&log);

    // Its tokens are stale: a write with one is refused and changes nothing.
    let stale = *r1_tokens.first().expect("r1 reconciled");
    let fenced: Client<Item> = store
        .client_fenced_by(&group.member("checker"))
        .fenced(stale);
    let before = store.get(&"item-0".to_owned()).expect("exists");
    let refused = fenced
        .update(Item {
            by: "late".to_owned(),
            ..Item::clone(&before)
        })
        .await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(store.get(&"item-0".to_owned()).expect("exists"), before);

    // r3 joins while every replica is busy (every item changed): the
    // shards it takes are drained by their old owners before it acquires.
    touch_all(&store).await;
    let r3 = start(sharded("r3", &group, &store, &log));
    eventually(
        "every key stamped by its owner of three again",
        LIMIT,
        || converged(&store, &group, &["r0", "r2", "r3"]),
    )
    .await;
    check_log(&log);
    let owned = (0..64)
        .filter_map(|i| group.owner(group.shard_count().shard(i)?))
        .filter(|(owner, _)| owner.as_str() == "r3")
        .count();
    assert!((8..=36).contains(&owned), "r3 owns {owned} of 64 shards");

    r3.stop().await;
    for (_, replica) in replicas {
        replica.stop().await;
    }
}

#[tokio::test]
async fn an_unsharded_controller_on_a_sharded_manager_is_refused() {
    let group = MemoryMembershipGroup::new("items", ShardCount::DEFAULT);
    let store = items();
    let mut manager = Manager::builder()
        .without_signals()
        .sharding(group.member("r0"), ShardCount::DEFAULT)
        .build()
        .expect("valid");
    let informer = manager
        .informer("items", || Informer::builder(store.clone()).build())
        .expect("registered");
    let stamp = Stamp {
        replica: "r0".to_owned(),
        group,
        log: Log::default(),
    };
    let controller = manager
        .controller("stamp", &informer, stamp)
        .build()
        .expect("valid");
    let added = manager.add_controller(controller);
    assert!(
        matches!(&added, Err(ManagerError::UnshardedController { controller }) if controller == "stamp"),
        "{added:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_membership_expires_stops_reconciling_and_fails() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let log = Log::default();
    let replica = start(sharded("r0", &group, &store, &log));
    eventually("every key stamped", LIMIT, || {
        converged(&store, &group, &["r0"])
    })
    .await;
    group.expire("r0");
    let ended = within("the replica's end", LIMIT, replica.run).await;
    assert!(
        matches!(ended.expect("not panicked"), Err(ManagerError::LostMembership { ref group }) if group == "items"),
    );
    check_log(&log);
}

/// The only replica, `r0`, of `group` (16 shards) over `store`, serving
/// HTTP, its `stamp` controller's writes fenced by the shards' tokens; once
/// it is ready (every shard owned).
async fn serving(
    group: &MemoryMembershipGroup,
    store: &MemoryStore<Item>,
) -> (Replica, std::net::SocketAddr) {
    let member = group.member("r0");
    let fenced = store.client_fenced_by(&member);
    let mut manager = Manager::builder()
        .without_signals()
        .http_address("127.0.0.1:0".parse().expect("an address"))
        .sharding(member, group.shard_count())
        .build()
        .expect("valid");
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("items", || Informer::builder(store.clone()).build())
        .expect("registered");
    let stamp = Stamp {
        replica: "r0".to_owned(),
        group: group.clone(),
        log: Log::default(),
    };
    let controller = manager
        .controller("stamp", &informer, stamp)
        .client(fenced)
        .build()
        .expect("valid");
    manager.add_sharded_controller(controller).expect("added");
    let replica = start(manager);
    let limit = Duration::from_secs(10);
    eventually("every shard owned", limit, || {
        group
            .shard_count()
            .shards()
            .all(|shard| group.owner(shard).is_some())
    })
    .await;
    let ready = within("ready", limit, async {
        loop {
            if http::get(address, "/readyz").await.status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    ready.await;
    (replica, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_shards_and_the_metrics_show_the_ownership() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let (replica, address) = serving(&group, &store).await;
    let shards = http::get(address, "/debug/shards").await;
    assert_eq!(shards.status, 200);
    let report: serde_json::Value = serde_json::from_str(&shards.body).expect("JSON");
    assert_eq!(report["member"], "r0");
    assert_eq!(report["members"], serde_json::json!(["r0"]));
    assert_eq!(report["assigned"].as_array().map(Vec::len), Some(16));
    let owned = report["owned"].as_array().expect("owned shards");
    assert_eq!(owned.len(), 16);
    let token = FencingToken::new(owned[0]["token"].as_u64().expect("a token"));
    let shard = group.shard_count().shard(0).expect("a shard");
    assert_eq!(group.owner(shard).map(|(_, t)| t), Some(token));
    let metrics = http::Exposition::parse(&http::get(address, "/metrics").await.body);
    assert_eq!(
        metrics.value("tend_shards_owned", &[("name", "items")]),
        Some(16.0)
    );
    // One acquisition observed per shard gained.
    let acquisitions = "tend_shard_acquisition_duration_seconds_count";
    assert_eq!(
        metrics.value(acquisitions, &[("name", "items")]),
        Some(16.0)
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_with_a_released_shards_token_are_refused_and_counted_in_the_metrics() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(16).expect("valid"));
    let store = items();
    let (replica, address) = serving(&group, &store).await;
    let limit = Duration::from_secs(10);
    eventually("every item stamped", limit, || {
        converged(&store, &group, &["r0"])
    })
    .await;
    let refused = "tend_controller_fenced_writes_refused_total";
    let stamp = [("controller", "stamp")];
    let scrape = || async { http::Exposition::parse(&http::get(address, "/metrics").await.body) };
    assert_eq!(
        scrape().await.value(refused, &stamp),
        Some(0.0),
        "exported from the start, none refused while owned"
    );

    // The shard's ownership ends behind the replica's back (as an etcd
    // ownership record deleted by hand): it still reconciles the shard's
    // keys, with a token no longer current.
    let key = "item-0".to_owned();
    let shard = group.shard_count().shard_of(&key);
    let (_, token) = group.owner(shard).expect("owned");
    // A second handle of the replica's member; dropping it would leave.
    let r0 = group.member("r0");
    r0.release(shard, token).await.expect("released");
    let item = store.get(&key).expect("exists");
    let cleared = Item {
        by: String::new(),
        ..Item::clone(&item)
    };
    store.client().update(cleared).await.expect("cleared");
    within("a refused write counted", limit, async {
        while scrape().await.value(refused, &stamp).unwrap_or_default() < 1.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let after = store.get(&key).expect("exists");
    assert_eq!(after.by, "", "the refused writes changed nothing");
    replica.stop().await;
    drop(r0);
}

/// On replica `r0`, holds each reconcile of the key `held` until the gate
/// opens (or the reconcile is cancelled), logging every reconcile's start
/// and end.
struct Gated {
    replica: String,
    held: String,
    gate: tokio::sync::watch::Receiver<bool>,
    log: Log,
    cancelled: Arc<Mutex<Vec<String>>>,
}

impl Reconciler<Item> for Gated {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let start = Instant::now();
        // Only the first owner holds it: the new owner must be free to run.
        let holds = self.replica == "r0" && *ctx.key() == self.held;
        if holds && ctx.object().is_some_and(|item| item.by == "hold") {
            let mut gate = self.gate.clone();
            let cancelled = ctx.cancelled();
            tokio::select! {
                _ = gate.wait_for(|open| *open) => {}
                () = cancelled.cancelled() => self.cancelled.lock().push(self.replica.clone()),
            }
        }
        self.log.lock().push(Record {
            replica: self.replica.clone(),
            key: ctx.key().clone(),
            token: ctx.fencing_token(),
            owner: None,
            start,
            end: Instant::now(),
            deleted: ctx.deleted().is_some(),
        });
        Ok(Action::Done)
    }
}

/// A sharded replica running `Gated` over `store`, with `handover` as its
/// handover timeout.
fn gated(
    name: &str,
    group: &MemoryMembershipGroup,
    store: &MemoryStore<Item>,
    (held, gate): (&str, &tokio::sync::watch::Receiver<bool>),
    (log, cancelled): (&Log, &Arc<Mutex<Vec<String>>>),
    handover: Duration,
) -> Replica {
    let reconciler = Gated {
        replica: name.to_owned(),
        held: held.to_owned(),
        gate: gate.clone(),
        log: Arc::clone(log),
        cancelled: Arc::clone(cancelled),
    };
    start(sharded_with(
        name,
        (group, store),
        handover,
        ("gated", reconciler),
    ))
}

/// The first key whose shard moves from `r0` to `r1` when `r1` joins.
fn moving_key(group: &MemoryMembershipGroup) -> String {
    let both = Assignment::compute(["r0", "r1"], group.shard_count());
    (0..KEYS)
        .map(|i| format!("item-{i}"))
        .find(|key| both.owner_of(key).map(MemberId::as_str) == Some("r1"))
        .expect("some shard moves to the joiner")
}

/// Starts `r0`, lets it reconcile every key, changes `held` (which r0's
/// reconcile then holds until the gate opens) and starts `r1`, to which the
/// held key's shard moves.
async fn join_while_held(
    (group, store): (&MemoryMembershipGroup, &MemoryStore<Item>),
    (held, gate): (&str, &tokio::sync::watch::Receiver<bool>),
    parts: (&Log, &Arc<Mutex<Vec<String>>>),
    handover: Duration,
) -> (Replica, Replica) {
    let r0 = gated("r0", group, store, (held, gate), parts, handover);
    eventually("r0 reconciles every key", LIMIT, || {
        parts.0.lock().len() >= KEYS
    })
    .await;
    let item = store.get(&held.to_owned()).expect("exists");
    let hold = Item {
        by: "hold".to_owned(),
        ..Item::clone(&item)
    };
    store.client().update(hold).await.expect("updated");
    let r1 = gated("r1", group, store, (held, gate), parts, handover);
    (r0, r1)
}

/// Runs a handover with a reconcile of a moving key in flight on the old
/// owner; returns the log, what was cancelled, and when the old owner's
/// reconcile of the key ended and the new owner's started.
async fn handover_with_a_reconcile_in_flight(
    handover: Duration,
    open_after: Option<Duration>,
) -> (Vec<Record>, Vec<String>) {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(8).expect("valid"));
    let store = items();
    let (log, cancelled) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
    let held = moving_key(&group);
    let (open, gate) = tokio::sync::watch::channel(false);
    let parts = (&log, &cancelled);
    let (r0, r1) = join_while_held((&group, &store), (&held, &gate), parts, handover).await;
    let shard = group.shard_count().shard_of(&held);
    // Well past the join: the shard is assigned to r1, but r0 still holds it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let owner = group.owner(shard).map(|(member, _)| member);
    assert_eq!(
        owner.as_ref().map(MemberId::as_str),
        Some("r0"),
        "held while in flight"
    );
    if let Some(after) = open_after {
        tokio::time::sleep(after).await;
        open.send(true).expect("replicas listen");
    }
    let joiner_ran = || {
        log.lock()
            .iter()
            .any(|r| r.replica == "r1" && r.key == held)
    };
    eventually("the new owner reconciles the moved key", LIMIT, joiner_ran).await;
    r1.stop().await;
    r0.stop().await;
    let records = log
        .lock()
        .iter()
        .filter(|r| r.key == held)
        .cloned()
        .collect();
    let cancelled = cancelled.lock().clone();
    (records, cancelled)
}

/// The old owner's held reconcile and the new owner's first one: the new
/// one starts only after the old one ended.
fn assert_handed_over_in_order(records: &[Record]) {
    let new = records
        .iter()
        .filter(|r| r.replica == "r1")
        .min_by_key(|r| r.start)
        .expect("r1 reconciled the key");
    // r0's last reconcile that started before it (later ones ran after r1
    // stopped and handed the shard back).
    let old = records
        .iter()
        .filter(|r| r.replica == "r0" && r.start <= new.start)
        .max_by_key(|r| r.start)
        .expect("r0 reconciled the key");
    assert!(
        new.start >= old.end,
        "the new owner started before the old one's reconcile ended: {old:?} then {new:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_moving_shard_is_released_only_after_its_reconcile_in_flight_ends() {
    let (records, cancelled) =
        handover_with_a_reconcile_in_flight(Duration::from_secs(60), Some(Duration::from_secs(5)))
            .await;
    assert!(
        cancelled.is_empty(),
        "it finished within the bound: {cancelled:?}"
    );
    assert_handed_over_in_order(&records);
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_past_the_handover_timeout_is_cancelled_then_the_shard_moves() {
    let (records, cancelled) =
        handover_with_a_reconcile_in_flight(Duration::from_secs(1), None).await;
    assert_eq!(
        cancelled,
        ["r0"],
        "r0's held reconcile was cancelled at the bound"
    );
    assert_handed_over_in_order(&records);
}

/// Waits until no reconcile has been logged for a second (of the paused
/// clock): the writes' own events have been reconciled too.
async fn quiet(log: &Log) {
    within("the replicas to go quiet", LIMIT, async {
        loop {
            let logged = log.lock().len();
            tokio::time::sleep(Duration::from_secs(1)).await;
            if log.lock().len() == logged {
                break;
            }
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_join_reconciles_only_the_keys_of_the_shards_it_moved() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(64).expect("valid"));
    let store = items();
    let log = Log::default();
    let three = ["r0", "r1", "r2"];
    let mut replicas: Vec<Replica> = three
        .iter()
        .map(|name| start(sharded(name, &group, &store, &log)))
        .collect();
    eventually("every key stamped by its owner of three", LIMIT, || {
        converged(&store, &group, &three)
    })
    .await;
    quiet(&log).await;
    let before = log.lock().len();
    replicas.push(start(sharded("r3", &group, &store, &log)));
    let four = ["r0", "r1", "r2", "r3"];
    eventually("every key stamped by its owner of four", LIMIT, || {
        converged(&store, &group, &four)
    })
    .await;
    quiet(&log).await;
    check_log(&log);

    let old = Assignment::compute(three, group.shard_count());
    let new = Assignment::compute(four, group.shard_count());
    let moved: Vec<_> = old.moved(&new).collect();
    let share = new.shards_of("r3").count();
    // The joiner's share (16 of 64, bounded loads) and a few shards moved
    // between the others as their room shrank.
    assert_eq!(share, 16);
    assert!(
        (share..=share + 18).contains(&moved.len()),
        "{} of 64 shards moved",
        moved.len()
    );
    let after = log.lock()[before..].to_vec();
    assert!(!after.is_empty(), "the moved shards' keys were reconciled");
    for record in &after {
        let shard = group.shard_count().shard_of(&record.key);
        assert!(
            moved.contains(&shard),
            "{record:?}: a key whose shard did not move was reconciled again"
        );
        assert_eq!(
            Some(record.replica.as_str()),
            new.owner(shard).map(MemberId::as_str),
            "{record:?} ran off its shard's new owner"
        );
    }
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_deleted_while_its_shard_is_between_owners_is_reconciled_by_the_new_owner() {
    let group = MemoryMembershipGroup::new("items", ShardCount::new(8).expect("valid"));
    let store = items();
    let (log, cancelled) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
    let held = moving_key(&group);
    let shard = group.shard_count().shard_of(&held);
    let gone = (0..KEYS)
        .map(|i| format!("item-{i}"))
        .find(|key| *key != held && group.shard_count().shard_of(key) == shard)
        .expect("another key of the moving shard");
    let (open, gate) = tokio::sync::watch::channel(false);
    let parts = (&log, &cancelled);
    let handover = Duration::from_secs(60);
    let (r0, r1) = join_while_held((&group, &store), (&held, &gate), parts, handover).await;
    // r0 drains the shard (its reconcile of `held` is in flight), so
    // neither replica owns it: the deletion passes both filters.
    tokio::time::sleep(Duration::from_millis(500)).await;
    store.client().delete(&gone).await.expect("deleted");
    tokio::time::sleep(Duration::from_millis(500)).await;
    open.send(true).expect("replicas listen");
    eventually("the new owner reconciles the deleted key", LIMIT, || {
        log.lock()
            .iter()
            .any(|r| r.replica == "r1" && r.key == gone && r.deleted)
    })
    .await;
    r1.stop().await;
    r0.stop().await;
}
