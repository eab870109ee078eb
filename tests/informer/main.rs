//! The informer against the memory backend: sync, live changes, relists,
//! subscribers, timers, errors, chaos and a proptest state machine.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, stream};
use tend::memory::{Faults, MemoryStore};
use tend::{
    Informer, InformerError, InformerSetting, Revision, SettingError, Snapshot, Source,
    SourceError, WatchStream,
};
use tokio::time::Instant;

use support::{
    Mirror, Pod, Recorder, Running, Seen, assert_same, by_owner, cache_versions, versions,
    wait_until, within,
};

mod chaos;
mod errors;
mod lag;
mod lifecycle;
mod live;
mod processing;
mod subscribers;
mod timers;
mod watch_failures;

const STEP: Duration = Duration::from_secs(5);

fn seeded(names: &[&str]) -> MemoryStore<Pod> {
    let store = MemoryStore::new("pods");
    let client = store.client();
    for name in names {
        // The memory client completes at once: no runtime needed.
        futures::executor::block_on(client.create(Pod::new(*name, "x", 1))).unwrap();
    }
    store
}

fn informer(store: &MemoryStore<Pod>) -> Informer<Pod> {
    Informer::builder(store.clone()).build().unwrap()
}

fn key(name: &str) -> String {
    name.to_owned()
}

/// Updates `name`'s status (a new version).
async fn touch(store: &MemoryStore<Pod>, name: &str) -> Pod {
    let mut pod = store.get(&key(name)).expect("pod exists");
    pod.status += 1;
    store.client().update(pod).await.unwrap()
}

async fn synced_and_watching(informer: &Informer<Pod>, store: &MemoryStore<Pod>, watches: u64) {
    within("the informer to sync", STEP, informer.wait_synced(STEP))
        .await
        .unwrap();
    wait_until("the informer watches", STEP, || {
        store.stats().watches >= watches
    })
    .await;
}

fn assert_cache_matches(informer: &Informer<Pod>, store: &MemoryStore<Pod>) {
    assert_same(
        "cache vs backend",
        &cache_versions(informer),
        &versions(&store.snapshot().objects),
    );
}
