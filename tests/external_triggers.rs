//! Triggers from outside the informers: `reconcile_on` (a channel of keys)
//! and `reconcile_all_on` (a signal that re-checks every key), each
//! reconcile reporting `Trigger::External`.

mod support;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use support::within;
use tend::controller::{Action, Context, Controller, ControllerBuilder, Reconciler, Trigger};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision};

#[derive(Debug, Clone)]
struct Item {
    name: String,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

fn item(name: &str) -> Item {
    Item {
        name: name.to_owned(),
        version: Revision::ZERO,
    }
}

/// One reconcile as seen: the key, whether its object was cached, and
/// whether an outside trigger asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    key: String,
    cached: bool,
    external: bool,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Run>>);

impl Recorder {
    fn external_runs(&self) -> Vec<Run> {
        let runs = self.0.lock().expect("not poisoned");
        runs.iter().filter(|run| run.external).cloned().collect()
    }

    fn count(&self) -> usize {
        self.0.lock().expect("not poisoned").len()
    }
}

impl Reconciler<Item> for Arc<Recorder> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        self.0.lock().expect("not poisoned").push(Run {
            key: ctx.key().clone(),
            cached: ctx.object().is_some(),
            external: ctx.triggers().contains(Trigger::External),
        });
        Ok(Action::Done)
    }
}

const LIMIT: Duration = Duration::from_secs(60);

/// A harness running `configure`d controller over `items`, settled once.
async fn start(
    items: &MemoryStore<Item>,
    configure: impl FnOnce(
        ControllerBuilder<Item, Arc<Recorder>>,
    ) -> ControllerBuilder<Item, Arc<Recorder>>,
) -> (Harness, Arc<Recorder>) {
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let recorder = Arc::new(Recorder::default());
    let builder = Controller::builder("triggered", &informer, Arc::clone(&recorder))
        .concurrency(NonZeroUsize::MIN);
    let controller = configure(builder).build().expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    harness.settle(LIMIT).await.expect("settled");
    (harness, recorder)
}

async fn seed(items: &MemoryStore<Item>, names: &[&str]) {
    for name in names {
        items.client().create(item(name)).await.expect("created");
    }
}

#[tokio::test(start_paused = true)]
async fn keys_from_a_channel_are_reconciled_with_an_external_trigger() {
    let items = MemoryStore::new("items");
    seed(&items, &["a", "b"]).await;
    let (pushed, keys) = mpsc::unbounded();
    // Sent before the controller runs: kept, and reconciled once synced.
    pushed.unbounded_send("a".to_owned()).expect("open");
    let (mut harness, recorder) = start(&items, |builder| builder.reconcile_on(keys)).await;
    assert_eq!(recorder.external_runs().len(), 1, "the early key ran once");

    // A key with no object is reconciled too: it sees none, as after a delete.
    pushed.unbounded_send("ghost".to_owned()).expect("open");
    harness.settle(LIMIT).await.expect("settled");
    let runs = recorder.external_runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].key, "a");
    assert!(runs[0].cached);
    assert_eq!(
        runs[1],
        Run {
            key: "ghost".to_owned(),
            cached: false,
            external: true
        }
    );

    // A closed stream leaves the controller running.
    drop(pushed);
    harness.settle(LIMIT).await.expect("settled");
    items.client().create(item("c")).await.expect("created");
    harness.settle(LIMIT).await.expect("settled");
    assert_eq!(recorder.count(), 5, "a, b, a, ghost, then c");
    within("shutdown", LIMIT, harness.shutdown())
        .await
        .expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_the_same_key_coalesces_into_one_reconcile() {
    let items = MemoryStore::new("items");
    let (pushed, keys) = mpsc::unbounded();
    let (mut harness, recorder) = start(&items, |builder| builder.reconcile_on(keys)).await;
    for _ in 0..100 {
        pushed.unbounded_send("hot".to_owned()).expect("open");
    }
    harness.settle(LIMIT).await.expect("settled");
    assert_eq!(
        recorder.external_runs().len(),
        1,
        "100 pushes, one queued key"
    );
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn an_all_keys_signal_reconciles_every_cached_key_once() {
    let items = MemoryStore::new("items");
    let names: Vec<String> = (0..600).map(|i| format!("item-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    seed(&items, &refs).await;
    let (signal, signals) = mpsc::unbounded();
    let (mut harness, recorder) = start(&items, |builder| builder.reconcile_all_on(signals)).await;
    assert!(recorder.external_runs().is_empty(), "no signal yet");
    assert_eq!(recorder.count(), 600, "the initial list");

    signal.unbounded_send(()).expect("open");
    harness.settle(LIMIT).await.expect("settled");
    let mut keys: Vec<String> = recorder
        .external_runs()
        .into_iter()
        .map(|r| r.key)
        .collect();
    keys.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(keys, expected, "every key, once, more than one run of keys");

    // Two signals in a row while nothing runs: every key still runs once
    // per reconcile it is queued for, never twice at once.
    signal.unbounded_send(()).expect("open");
    signal.unbounded_send(()).expect("open");
    harness.settle(LIMIT).await.expect("settled");
    let runs = recorder.external_runs().len();
    assert!(
        (1200..=1800).contains(&runs),
        "two more signals: between one and two runs per key, got {runs}"
    );
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_timer_stream_rechecks_everything_on_each_tick() {
    let items = MemoryStore::new("items");
    seed(&items, &["a", "b", "c"]).await;
    let ticks = futures::stream::unfold(0u32, |n| async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        (n < 3).then_some(((), n + 1))
    });
    let (mut harness, recorder) = start(&items, |builder| builder.reconcile_all_on(ticks)).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    harness.settle(LIMIT).await.expect("settled");
    assert_eq!(
        recorder.external_runs().len(),
        9,
        "three ticks of three keys"
    );
    harness.shutdown().await.expect("clean");
}
