//! An object a change replaced is freed off the path of the reconcile the
//! change wakes: the informer queues the key and yields first, so the
//! reconcile does not wait for the frees.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::testing::Harness;
use tend::{Change, Informer, Revision};

/// What happened, in order.
type Log = Arc<Mutex<Vec<String>>>;

/// An item that logs when it is freed.
#[derive(Debug, Clone)]
struct Item {
    id: u64,
    version: Revision,
    log: Log,
}

tend::impl_object!(Item, key: id: u64, version: version);

impl Drop for Item {
    fn drop(&mut self) {
        let line = format!("freed {}", self.version);
        self.log.lock().expect("not poisoned").push(line);
    }
}

/// Logs each reconcile's start, with the version it sees.
struct Logs(Log);

impl Reconciler<Item> for Logs {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        let seen = ctx
            .object()
            .map_or("none".to_owned(), |o| o.version.to_string());
        self.0
            .lock()
            .expect("not poisoned")
            .push(format!("reconciled {seen}"));
        Ok(Action::Done)
    }
}

fn position(log: &Log, line: &str) -> Option<usize> {
    log.lock()
        .expect("not poisoned")
        .iter()
        .position(|l| l == line)
}

#[tokio::test(start_paused = true)]
async fn a_replaced_object_is_freed_after_the_reconcile_it_woke_started() {
    let log = Log::default();
    let (source, tx) = support::Scripted::new(Vec::new(), Revision::ZERO);
    let informer = Informer::builder(source).build().expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("frees", &informer, Logs(log.clone()))
            .build()
            .expect("valid"),
    );
    let item = |version: u64| Item {
        id: 1,
        version: Revision::new(version),
        log: log.clone(),
    };
    let send = |change| tx.send(change).expect("the informer watches");
    send(Change::Applied(item(1)));
    let settle = Duration::from_secs(10);
    harness.settle(settle).await.expect("settled");
    send(Change::Applied(item(2)));
    harness.settle(settle).await.expect("settled");
    // Freed while the informer runs on, not kept until it stops.
    let freed_running = position(&log, "freed 1").is_some();
    harness.shutdown().await.expect("clean");
    let lines = log.lock().expect("not poisoned").clone();
    let (Some(reconciled), Some(freed)) =
        (position(&log, "reconciled 2"), position(&log, "freed 1"))
    else {
        panic!("a reconcile or a free missing: {lines:?}");
    };
    assert!(
        reconciled < freed,
        "version 1 freed before version 2's reconcile: {lines:?}"
    );
    assert!(
        freed_running,
        "version 1 kept until the informer stopped: {lines:?}"
    );
}
