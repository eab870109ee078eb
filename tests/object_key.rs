//! `Object::key` is user code, and may be costly: the informer computes a
//! change's key once, when it applies the change, and hands it along with
//! the event, so the controller's primary path never calls it again; nor
//! do resyncs and late subscribers, which take the keys from the cache.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::Scripted;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::testing::Harness;
use tend::{Change, Informer, Object, Revision};
use tokio::sync::mpsc;

/// An object whose `key` counts its calls (every object of a test shares
/// one counter).
#[derive(Debug, Clone)]
struct Counted {
    id: u64,
    version: Revision,
    calls: Arc<AtomicUsize>,
}

impl Object for Counted {
    type Key = u64;

    fn key(&self) -> u64 {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.id
    }

    fn version(&self) -> Revision {
        self.version
    }

    fn set_version(&mut self, version: Revision) {
        self.version = version;
    }
}

/// How many reconciles each key had.
#[derive(Default)]
struct Runs(Mutex<BTreeMap<u64, usize>>);

impl Runs {
    fn total(&self) -> usize {
        self.0.lock().expect("not poisoned").values().sum()
    }
}

impl Reconciler<Counted> for Arc<Runs> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Counted>) -> Result<Action, Self::Error> {
        *self
            .0
            .lock()
            .expect("not poisoned")
            .entry(*ctx.key())
            .or_default() += 1;
        Ok(Action::Done)
    }
}

/// Three listed objects with one counter; an informer over them (resyncing
/// every minute if `resync`); the channel that feeds its watch.
fn world(
    resync: bool,
) -> (
    Arc<AtomicUsize>,
    Informer<Counted>,
    mpsc::UnboundedSender<Change<Counted>>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let listed = (1..=3).map(|id| counted(id, 1, &calls)).collect::<Vec<_>>();
    let (source, tx) = Scripted::new(listed, Revision::new(1));
    let mut builder = Informer::builder(source);
    if resync {
        builder = builder.resync_every(Duration::from_secs(60));
    }
    (calls, builder.build().expect("valid"), tx)
}

fn counted(id: u64, version: u64, calls: &Arc<AtomicUsize>) -> Counted {
    Counted {
        id,
        version: Revision::new(version),
        calls: Arc::clone(calls),
    }
}

async fn settle(harness: &mut Harness) {
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("settled");
}

#[tokio::test(start_paused = true)]
async fn each_applied_change_costs_one_key_call_and_a_delete_none() {
    let (calls, informer, tx) = world(false);
    let runs = Arc::new(Runs::default());
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("counted", &informer, Arc::clone(&runs))
            .build()
            .expect("valid"),
    );
    settle(&mut harness).await;
    assert_eq!(runs.total(), 3, "each listed key reconciled");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "one call per listed object, by the informer's list"
    );
    // Two updates and a creation: one call each, when the informer applies them.
    for (id, version) in [(1, 2), (2, 3), (4, 4)] {
        let object = counted(id, version, &calls);
        tx.send(Change::Applied(object)).expect("watching");
        settle(&mut harness).await;
    }
    assert_eq!(runs.total(), 6, "each change reconciled");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        6,
        "one call per applied change: the controller used the informer's key"
    );
    // A deletion names its key: nobody calls `key` on the last state.
    let revision = Revision::new(5);
    tx.send(Change::Deleted { key: 3, revision })
        .expect("watching");
    settle(&mut harness).await;
    assert_eq!(
        runs.0.lock().expect("not poisoned")[&3],
        2,
        "the delete reconciled"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 6, "no call for a delete");
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn resyncs_and_late_subscribers_call_no_key() {
    let (calls, informer, _tx) = world(true);
    let early = Arc::new(Runs::default());
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("early", &informer, Arc::clone(&early))
            .resync(Duration::from_secs(60))
            .build()
            .expect("valid"),
    );
    settle(&mut harness).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "the list's calls");
    // Subscribes to a synced informer: the cache is replayed to it.
    let late = Arc::new(Runs::default());
    harness.controller(
        Controller::builder("late", &informer, Arc::clone(&late))
            .build()
            .expect("valid"),
    );
    settle(&mut harness).await;
    assert_eq!(late.total(), 3, "the replay reconciled every key");
    // The informer's resync and the controller's own.
    tokio::time::sleep(Duration::from_secs(70)).await;
    settle(&mut harness).await;
    assert!(
        early.total() >= 6 && late.total() >= 6,
        "both resyncs ran: {} and {} reconciles",
        early.total(),
        late.total()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "replays and resyncs take keys from the cache"
    );
    harness.shutdown().await.expect("clean");
}
