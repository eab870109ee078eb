//! Cleanup by finalizer, on any backend, through `tend::controller::finalizer`:
//! a controller that keeps a finalizer on every object and, once one is
//! being deleted, performs an external cleanup (counted) before the helper
//! removes the finalizer. Run by `tests/client.rs` (memory),
//! `tests/etcd_client.rs` and `tests/kube_finalizer.rs`.

#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tend::client::Client;
use tend::controller::{
    Action, Context, Controller, Finalize, FinalizerError, Reconciler, finalizer,
};
use tend::testing::Harness;
use tend::{Informer, Object};

/// The finalizer the cleaner owns.
pub const FINALIZER: &str = "tend.test/cleanup";

/// The external system refused the cleanup.
#[derive(Debug)]
pub struct Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the external system refused the cleanup")
    }
}

impl std::error::Error for Refused {}

/// What the cleaner counts and how it misbehaves.
#[derive(Default)]
pub struct Counts {
    /// Cleanups that succeeded.
    pub cleanups: AtomicU32,
    /// Cleanups attempted (failed ones too).
    pub attempts: AtomicU32,
    /// Live objects applied.
    pub applies: AtomicU32,
    /// Cleanups still to fail before one succeeds.
    pub failures_left: AtomicU32,
    /// When set, a cleanup says so (`stalled`) and never returns: the
    /// process is about to die.
    pub stall: Option<Arc<AtomicBool>>,
}

/// Keeps [`FINALIZER`] on objects, cleans up deleted ones once.
pub struct Cleaner(pub Arc<Counts>);

impl<O: Object + PartialEq> Reconciler<O> for Cleaner {
    type Error = FinalizerError<Refused>;

    async fn reconcile(&self, ctx: Context<O>) -> Result<Action, Self::Error> {
        let counts = &self.0;
        finalizer(&ctx, FINALIZER, |step| async move {
            match step {
                Finalize::Apply(_) => {
                    counts.applies.fetch_add(1, Ordering::SeqCst);
                }
                Finalize::Cleanup(_) => {
                    counts.attempts.fetch_add(1, Ordering::SeqCst);
                    if let Some(stalled) = &counts.stall {
                        stalled.store(true, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    }
                    let failing = counts.failures_left.fetch_update(
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                        |n| n.checked_sub(1),
                    );
                    if failing.is_ok() {
                        return Err(Refused);
                    }
                    counts.cleanups.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(Action::Done)
        })
        .await
    }
}

/// Runs a cleaner over a fresh informer from `informer` in a new harness.
fn start<O: Object + PartialEq>(
    informer: &impl Fn() -> Informer<O>,
    client: &Client<O>,
    counts: &Arc<Counts>,
) -> Harness {
    let informer = informer();
    let controller = Controller::builder("cleaner", informer.clone(), Cleaner(Arc::clone(counts)))
        .client(client.clone())
        .build()
        .expect("a valid controller");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    harness
}

/// Whether the stored object under `key` carries [`FINALIZER`].
async fn guarded<O: Object>(client: &Client<O>, key: &O::Key) -> Option<O> {
    let stored = client.get(key).await.expect("read");
    stored.filter(|o| {
        o.finalizer_names()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
    })
}

/// The controller is killed after it saw the delete and before it cleaned
/// up; a new one (fresh informer, fresh memory) cleans up exactly once and
/// the object then disappears; a third one never cleans it up again.
pub async fn cleanup_runs_exactly_once_across_a_restart<O: Object + PartialEq>(
    client: Client<O>,
    informer: impl Fn() -> Informer<O>,
    object: O,
    limit: Duration,
) {
    let key = client.create(object).await.expect("created").key();
    let stalled = Arc::new(AtomicBool::new(false));
    let stalling = Arc::new(Counts {
        stall: Some(Arc::clone(&stalled)),
        ..Counts::default()
    });
    let mut first = start(&informer, &client, &stalling);
    first.settle(limit).await.expect("settled");
    assert!(
        guarded(&client, &key).await.is_some(),
        "the finalizer was added"
    );
    // Applied right after adding it, not only once its write comes back
    // (a generation predicate would drop that write's event).
    assert!(stalling.applies.load(Ordering::SeqCst) >= 1, "applied");

    client.delete(&key).await.expect("delete asked");
    crate::support::eventually("the delete to reach the cleanup", limit, || {
        stalled.load(Ordering::SeqCst)
    })
    .await;
    drop(first); // killed: its tasks are aborted mid-cleanup
    let marked = guarded(&client, &key).await.expect("kept by its finalizer");
    assert!(marked.deletion().is_some());

    let counts = Arc::new(Counts::default());
    let mut second = start(&informer, &client, &counts);
    second.settle(limit).await.expect("settled");
    assert_eq!(counts.cleanups.load(Ordering::SeqCst), 1, "cleaned up once");
    assert!(
        client.get(&key).await.expect("read").is_none(),
        "then removed"
    );
    second.shutdown().await.expect("stopped");
    let mut third = start(&informer, &client, &counts);
    third.settle(limit).await.expect("settled");
    assert_eq!(counts.attempts.load(Ordering::SeqCst), 1, "and never again");
    third.shutdown().await.expect("stopped");
}

/// A cleanup that fails keeps the finalizer (and the object) and is
/// retried until it succeeds; then the object is removed.
pub async fn a_failing_cleanup_is_retried_until_it_succeeds<O: Object + PartialEq>(
    client: Client<O>,
    informer: impl Fn() -> Informer<O>,
    object: O,
    limit: Duration,
) {
    let key = client.create(object).await.expect("created").key();
    let counts = Arc::new(Counts {
        failures_left: AtomicU32::new(u32::MAX),
        ..Counts::default()
    });
    let mut harness = start(&informer, &client, &counts);
    harness.settle(limit).await.expect("settled");
    client.delete(&key).await.expect("delete asked");
    crate::support::eventually("two failed cleanups", limit, || {
        counts.attempts.load(Ordering::SeqCst) >= 2
    })
    .await;
    let held = guarded(&client, &key).await;
    assert!(
        held.is_some_and(|o| o.deletion().is_some()),
        "kept while the cleanup fails"
    );
    counts.failures_left.store(0, Ordering::SeqCst); // the external system is back
    crate::support::eventually("the cleanup to succeed", limit, || {
        counts.cleanups.load(Ordering::SeqCst) == 1
    })
    .await;
    harness.settle(limit).await.expect("settled");
    assert!(
        client.get(&key).await.expect("read").is_none(),
        "removed after the cleanup"
    );
    assert!(
        counts.attempts.load(Ordering::SeqCst) >= 3,
        "retried after each failure"
    );
    assert_eq!(
        counts.cleanups.load(Ordering::SeqCst),
        1,
        "and succeeded once"
    );
    harness.shutdown().await.expect("stopped");
}
