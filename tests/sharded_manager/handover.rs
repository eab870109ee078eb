//! Handing a shard over with a reconcile in flight.

use super::*;

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
pub(super) fn moving_key(group: &MemoryMembershipGroup) -> String {
    let both = Assignment::compute(["r0", "r1"], group.shard_count());
    (0..KEYS)
        .map(|i| format!("item-{i}"))
        .find(|key| both.owner_of(key).map(MemberId::as_str) == Some("r1"))
        .expect("some shard moves to the joiner")
}

/// Starts `r0`, lets it reconcile every key, changes `held` (which r0's
/// reconcile then holds until the gate opens) and starts `r1`, to which the
/// held key's shard moves.
pub(super) async fn join_while_held(
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
