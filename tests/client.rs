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

use tend::Informer;

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
    cleanup::cleanup_runs_exactly_once_across_a_restart(store.client(), informer, limit).await;
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
