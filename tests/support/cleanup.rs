//! Cleanup that survives a restart, on any backend: a controller whose
//! reconcile puts a finalizer on every volume and, once a volume is being
//! deleted, performs an external cleanup (counted) and removes the
//! finalizer. Run by `tests/client.rs` (memory) and `tests/etcd_client.rs`.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::testing::Harness;
use tend::{Informer, Object};

use crate::suite::{Volume, volume};

/// The finalizer the cleaner owns.
pub const FINALIZER: &str = "tend.test/cleanup";

/// Puts [`FINALIZER`] on volumes, cleans up deleted ones once.
pub struct Cleaner {
    pub client: Client<Volume>,
    /// External cleanups performed.
    pub cleanups: Arc<AtomicU32>,
    /// When set, a reconcile that finds a volume being deleted says so
    /// (`stalled`) and never returns: the process is about to die.
    pub stall: Option<Arc<AtomicBool>>,
}

impl Reconciler<Volume> for Cleaner {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Volume>) -> Result<Action, ClientError> {
        let Some(volume) = ctx.object() else {
            return Ok(Action::Done);
        };
        if volume.deletion().is_none() {
            self.client.add_finalizer(ctx.key(), FINALIZER).await?;
            return Ok(Action::Done);
        }
        if let Some(stalled) = &self.stall {
            stalled.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        // A live read: the cache may still show the finalizer just removed.
        let live = self.client.get(ctx.key()).await?;
        if live.is_some_and(|v| v.lifecycle.has_finalizer(FINALIZER)) {
            self.cleanups.fetch_add(1, Ordering::SeqCst);
            self.client.remove_finalizer(ctx.key(), FINALIZER).await?;
        }
        Ok(Action::Done)
    }
}

/// Runs a cleaner over a fresh informer from `informer` in a new harness.
fn start(
    informer: &impl Fn() -> Informer<Volume>,
    client: &Client<Volume>,
    cleanups: &Arc<AtomicU32>,
    stall: Option<Arc<AtomicBool>>,
) -> Harness {
    let informer = informer();
    let cleaner = Cleaner {
        client: client.clone(),
        cleanups: Arc::clone(cleanups),
        stall,
    };
    let controller = Controller::builder("cleaner", informer.clone(), cleaner)
        .build()
        .expect("a valid controller");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    harness
}

/// The controller is killed after it saw the delete and before it cleaned
/// up; a new one (fresh informer, fresh memory) cleans up exactly once and
/// the volume then disappears.
pub async fn cleanup_runs_exactly_once_across_a_restart(
    client: Client<Volume>,
    informer: impl Fn() -> Informer<Volume>,
    limit: Duration,
) {
    let cleanups = Arc::new(AtomicU32::new(0));
    client.create(volume("v", &[])).await.unwrap();
    let stalled = Arc::new(AtomicBool::new(false));
    let mut first = start(&informer, &client, &cleanups, Some(Arc::clone(&stalled)));
    first.settle(limit).await.unwrap();
    let key = "v".to_owned();
    let guarded = client.get(&key).await.unwrap().unwrap();
    assert!(guarded.lifecycle.has_finalizer(FINALIZER), "{guarded:?}");

    client.delete(&key).await.unwrap();
    crate::support::eventually("the delete to reach the reconcile", limit, || {
        stalled.load(Ordering::SeqCst)
    })
    .await;
    drop(first); // killed: its tasks are aborted mid-reconcile
    let marked = client
        .get(&key)
        .await
        .unwrap()
        .expect("kept by its finalizer");
    assert!(marked.deletion().is_some());
    assert_eq!(cleanups.load(Ordering::SeqCst), 0);

    let mut second = start(&informer, &client, &cleanups, None);
    second.settle(limit).await.unwrap();
    assert_eq!(cleanups.load(Ordering::SeqCst), 1, "cleaned up once");
    assert_eq!(client.get(&key).await.unwrap(), None, "then removed");
    second.shutdown().await.unwrap();
    let mut third = start(&informer, &client, &cleanups, None);
    third.settle(limit).await.unwrap();
    assert_eq!(cleanups.load(Ordering::SeqCst), 1, "and never again");
    third.shutdown().await.unwrap();
}
