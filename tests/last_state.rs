//! The last state of what was deleted: a reconcile of a deleted key gets the
//! object's last cached state (`Context::deleted`) until it succeeds once,
//! whether the delete was seen live or found on a relist.

mod support;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::controller::{Action, Context, Controller, ErrorPolicy, Reconciler, Triggers};
use tend::memory::{Faults, MemoryStore};
use tend::testing::Harness;
use tend::{Informer, Revision, WorkQueue};

const LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
struct Record {
    name: String,
    value: u64,
    version: Revision,
}

tend::impl_object!(Record, key: name: String, version: version);

/// What one reconcile saw: the object's value, the deleted one's value.
type Seen = (Option<u64>, Option<u64>);

/// Records what each reconcile saw; fails the first reconcile that is
/// handed a last state when `fail_cleanup_once` is set, as a terminal
/// error when `terminal` is set.
#[derive(Default)]
struct Cleans {
    seen: Mutex<Vec<Seen>>,
    fail_cleanup_once: Mutex<bool>,
    terminal: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("cleanup failed")]
struct CleanupFailed;

impl Reconciler<Record> for Arc<Cleans> {
    type Error = CleanupFailed;

    async fn reconcile(&self, ctx: Context<Record>) -> Result<Action, CleanupFailed> {
        let seen = (
            ctx.object().map(|r| r.value),
            ctx.deleted().map(|r| r.value),
        );
        self.seen.lock().push(seen);
        if seen.1.is_some() && std::mem::take(&mut *self.fail_cleanup_once.lock()) {
            return Err(CleanupFailed);
        }
        Ok(Action::Done)
    }

    fn error_policy(&self, _: &CleanupFailed) -> ErrorPolicy {
        if self.terminal {
            ErrorPolicy::Terminal
        } else {
            ErrorPolicy::Retry
        }
    }
}

fn record(value: u64) -> Record {
    Record {
        name: "a".into(),
        value,
        version: Revision::ZERO,
    }
}

fn start(
    records: &MemoryStore<Record>,
    informer: &Informer<Record>,
    cleans: &Arc<Cleans>,
) -> (Harness, WorkQueue<String, Triggers>) {
    let _ = records;
    let controller = Controller::builder("cleans", informer, Arc::clone(cleans))
        .build()
        .expect("valid");
    let queue = controller.queue();
    let mut harness = Harness::new();
    harness.informer(informer);
    harness.controller(controller);
    (harness, queue)
}

/// Creates `a` (7), deletes it, then adds its key once more by hand,
/// settling after each step.
async fn create_delete_and_add(
    records: &MemoryStore<Record>,
    harness: &mut Harness,
    queue: &WorkQueue<String, Triggers>,
) {
    let client = records.client();
    client.create(record(7)).await.expect("created");
    harness.settle(LIMIT).await.expect("settled");
    client.delete(&"a".to_owned()).await.expect("deleted");
    harness.settle(LIMIT).await.expect("settled");
    queue.add("a".to_owned());
    harness.settle(LIMIT).await.expect("settled");
}

#[tokio::test(start_paused = true)]
async fn a_delete_seen_live_hands_the_last_state_over_until_a_reconcile_succeeds() {
    let records = MemoryStore::new("records");
    let informer = Informer::builder(records.clone()).build().expect("valid");
    let cleans = Arc::new(Cleans::default());
    *cleans.fail_cleanup_once.lock() = true;
    let (mut harness, queue) = start(&records, &informer, &cleans);
    // Once more by hand after the delete: the cleanup succeeded, nothing
    // is handed over.
    create_delete_and_add(&records, &mut harness, &queue).await;
    let client = records.client();
    client.create(record(9)).await.expect("created again");
    harness.settle(LIMIT).await.expect("settled");
    harness.shutdown().await.expect("clean");
    let seen = cleans.seen.lock().clone();
    assert_eq!(
        seen,
        [
            (Some(7), None),
            // The failed cleanup, and its retry: handed over until success.
            (None, Some(7)),
            (None, Some(7)),
            (None, None),
            (Some(9), None),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminal_error_ends_the_last_state_of_a_deleted_key() {
    let records = MemoryStore::new("records");
    let informer = Informer::builder(records.clone()).build().expect("valid");
    let cleans = Arc::new(Cleans {
        fail_cleanup_once: Mutex::new(true),
        terminal: true,
        ..Cleans::default()
    });
    let (mut harness, queue) = start(&records, &informer, &cleans);
    // Nothing would run the deleted key again: its last state is not kept.
    create_delete_and_add(&records, &mut harness, &queue).await;
    harness.shutdown().await.expect("clean");
    let seen = cleans.seen.lock().clone();
    assert_eq!(seen, [(Some(7), None), (None, Some(7)), (None, None)]);
}

#[tokio::test(start_paused = true)]
async fn a_delete_found_on_a_relist_hands_the_last_state_over() {
    let records = MemoryStore::new("records");
    // Every watch event is lost: only the relists see the changes.
    records
        .set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        })
        .expect("valid faults");
    let informer = Informer::builder(records.clone())
        .relist_every(Duration::from_secs(60))
        .build()
        .expect("valid");
    let cleans = Arc::new(Cleans::default());
    let (harness, _queue) = start(&records, &informer, &cleans);
    let client = records.client();
    client.create(record(7)).await.expect("created");
    support::wait_until("the relist's create", LIMIT, || {
        cleans.seen.lock().len() == 1
    })
    .await;
    client.delete(&"a".to_owned()).await.expect("deleted");
    support::wait_until("the relist's delete", LIMIT, || {
        cleans.seen.lock().len() == 2
    })
    .await;
    harness.shutdown().await.expect("clean");
    assert_eq!(
        cleans.seen.lock().clone(),
        [(Some(7), None), (None, Some(7))]
    );
}
