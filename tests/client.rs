//! The client on the memory backend: the shared suite
//! (`support/client_suite.rs`, also run on etcd), in-process fencing, and
//! cleanup by finalizer across a restart (`support/cleanup.rs`).

#[path = "support/client_suite.rs"]
mod suite;

#[path = "support/cleanup.rs"]
mod cleanup;

#[path = "support/wait.rs"]
mod support;

use std::time::Duration;

use std::sync::atomic::Ordering;

use tend::Informer;
use tend::controller::{Action, Context, Controller, Finalize, Reconciler, finalizer};
use tend::testing::Harness;

use tend::client::{Client, ClientError, FencingToken};
use tend::election::LeaderElector;
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;

use suite::{Item, Volume, item};

#[tokio::test]
async fn the_client_suite_holds_on_the_memory_backend() {
    suite::run_all(|name| {
        let client: Client<Item> = MemoryStore::new(name.to_owned()).client();
        async move { client }
    })
    .await;
}

#[tokio::test]
async fn the_finalizer_suite_holds_on_the_memory_backend() {
    suite::run_finalizers(|name| {
        let client: Client<Volume> = MemoryStore::new(name.to_owned()).client();
        async move { client }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_finalizers_cleanup_runs_exactly_once_across_a_controller_restart() {
    let store: MemoryStore<Volume> = MemoryStore::new("volumes");
    let informer = || Informer::builder(store.clone()).build().unwrap();
    let limit = Duration::from_secs(10);
    let volume = suite::volume("v", &[]);
    cleanup::cleanup_runs_exactly_once_across_a_restart(store.client(), informer, volume, limit)
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_finalizers_failing_cleanup_is_retried_until_it_succeeds() {
    let store: MemoryStore<Volume> = MemoryStore::new("volumes");
    let informer = || Informer::builder(store.clone()).build().unwrap();
    let volume = suite::volume("v", &[]);
    let limit = Duration::from_secs(10);
    cleanup::a_failing_cleanup_is_retried_until_it_succeeds(
        store.client(),
        informer,
        volume,
        limit,
    )
    .await;
}

#[tokio::test]
async fn a_deposed_leaders_writes_are_fenced_and_change_nothing() {
    let election = MemoryElectionGroup::new("items");
    let store = MemoryStore::new("items");
    let (old, new) = (election.candidate(), election.candidate());
    let client = store.client_fenced_by(&old);
    let stale = old.campaign().await.unwrap();
    election.depose();
    let current = new.campaign().await.unwrap();
    assert!(current > stale);
    suite::a_stale_token_is_fenced_and_changes_nothing(
        client.fenced(stale),
        client.fenced(current),
    )
    .await;
}

#[tokio::test]
async fn a_leaders_writes_are_fenced_from_the_moment_it_is_deposed() {
    let election = MemoryElectionGroup::new("items");
    let store = MemoryStore::new("items");
    let leader = election.candidate();
    let token = leader.campaign().await.unwrap();
    let client = store.client_fenced_by(&leader).fenced(token);
    client.create(item("a", 1)).await.unwrap();
    let revision = store.revision();
    election.depose();
    let error = client.create(item("b", 1)).await.unwrap_err();
    assert!(matches!(error, ClientError::Fenced { token: t } if t == token));
    assert_eq!(
        error.to_string(),
        format!("fencing token {token} is no longer current")
    );
    assert_eq!(
        store.revision(),
        revision,
        "a refused write takes no revision"
    );
    // Unfenced writes are not checked (seeding, a CLI).
    client.unfenced().create(item("c", 1)).await.unwrap();
    // With no leader at all, every token is stale.
    assert!(
        client
            .fenced(FencingToken::new(token.get() + 1))
            .create(item("d", 1))
            .await
            .unwrap_err()
            .is_fenced()
    );
}

#[tokio::test]
async fn the_client_is_a_cheap_handle_that_reads_live() {
    let store = MemoryStore::new("items");
    let client = store.client();
    let other = client.clone();
    assert_eq!(client.name(), "items");
    // A write through one handle, or to the store, is seen by every other
    // at once: reads are not cached.
    client.create(item("a", 1)).await.unwrap();
    assert_eq!(other.get(&"a".to_owned()).await.unwrap().unwrap().value, 1);
    store.put(item("a", 2));
    assert_eq!(other.get(&"a".to_owned()).await.unwrap().unwrap().value, 2);
    assert!(format!("{client:?}").contains("items"));
}

/// Records what `finalizer` returned for each reconcile; its cleanup asks
/// for a requeue the first time.
struct Recording {
    name: &'static str,
    results: std::sync::Mutex<Vec<String>>,
    cleanups: std::sync::atomic::AtomicU32,
}

impl Recording {
    fn new(name: &'static str) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            name,
            results: std::sync::Mutex::default(),
            cleanups: std::sync::atomic::AtomicU32::new(0),
        })
    }

    fn results(&self) -> Vec<String> {
        self.results.lock().unwrap().clone()
    }
}

impl Reconciler<Volume> for std::sync::Arc<Recording> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Volume>) -> Result<Action, Self::Error> {
        let result = finalizer(&ctx, self.name, |step| async move {
            match step {
                Finalize::Apply(_) => Ok::<_, cleanup::Refused>(Action::Done),
                Finalize::Cleanup(_) => {
                    let first = self.cleanups.fetch_add(1, Ordering::SeqCst) == 0;
                    Ok(if first {
                        Action::RequeueAfter(Duration::from_secs(5))
                    } else {
                        Action::Done
                    })
                }
            }
        })
        .await;
        self.results.lock().unwrap().push(match &result {
            Ok(action) => format!("{action:?}"),
            Err(error) => error.to_string(),
        });
        Ok(result.unwrap_or(Action::Done))
    }
}

/// Runs `recording` over a fresh store holding volume `v`, with a client
/// when `with_client`; settles.
async fn run_recording(
    recording: &std::sync::Arc<Recording>,
    with_client: bool,
) -> (Harness, MemoryStore<Volume>) {
    let store: MemoryStore<Volume> = MemoryStore::new("volumes");
    store
        .client()
        .create(suite::volume("v", &[]))
        .await
        .unwrap();
    let informer = Informer::builder(store.clone()).build().unwrap();
    let mut builder = Controller::builder(
        "recording",
        informer.clone(),
        std::sync::Arc::clone(recording),
    );
    if with_client {
        builder = builder.client(store.client());
    }
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(builder.build().unwrap());
    harness.settle(Duration::from_secs(10)).await.unwrap();
    (harness, store)
}

#[tokio::test(start_paused = true)]
async fn finalizer_refuses_a_controller_without_a_client_and_an_empty_name() {
    let recording = Recording::new("tend.test/cleanup");
    let (harness, _) = run_recording(&recording, false).await;
    assert_eq!(
        recording.results(),
        ["the controller has no client for its objects (see ControllerBuilder::client)"]
    );
    harness.shutdown().await.unwrap();
    let recording = Recording::new("");
    let (harness, store) = run_recording(&recording, true).await;
    assert_eq!(recording.results(), ["a finalizer's name cannot be empty"]);
    let stored = store.client().get(&"v".to_owned()).await.unwrap().unwrap();
    assert!(stored.lifecycle.finalizers().is_empty(), "nothing written");
    harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cleanup_that_asks_for_a_requeue_keeps_the_finalizer_until_it_is_done() {
    let recording = Recording::new("tend.test/cleanup");
    let (mut harness, store) = run_recording(&recording, true).await;
    let key = "v".to_owned();
    store.client().delete(&key).await.unwrap();
    support::eventually("the first cleanup", Duration::from_secs(10), || {
        recording.cleanups.load(Ordering::SeqCst) == 1
    })
    .await;
    let held = store
        .client()
        .get(&key)
        .await
        .unwrap()
        .expect("kept while cleaning up");
    assert!(held.lifecycle.has_finalizer("tend.test/cleanup"));
    support::eventually(
        "the cleanup after the requeue",
        Duration::from_secs(60),
        || recording.cleanups.load(Ordering::SeqCst) == 2,
    )
    .await;
    harness.settle(Duration::from_secs(10)).await.unwrap();
    assert!(
        store.client().get(&key).await.unwrap().is_none(),
        "then removed"
    );
    harness.shutdown().await.unwrap();
}
