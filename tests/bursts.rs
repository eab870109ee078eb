//! A burst of changes to one key is reconciled once, at its last version:
//! the informer hands keys to the queue when its input is drained (or after
//! a bound), not wherever tokio's budget cuts a run of events.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::testing::Harness;
use tend::{Change, Informer, Revision};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
struct Item {
    id: u64,
    value: u64,
    version: Revision,
}

tend::impl_object!(Item, key: id: u64, version: version);

/// Records the values each key was reconciled at.
#[derive(Default)]
struct Seen(Mutex<HashMap<u64, Vec<u64>>>);

impl Reconciler<Item> for Arc<Seen> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        if let Some(item) = ctx.object() {
            let mut seen = self.0.lock().expect("not poisoned");
            seen.entry(item.id).or_default().push(item.value);
        }
        Ok(Action::Done)
    }
}

/// A controller over a channel source, synced; the channel's sender.
async fn start() -> (mpsc::UnboundedSender<Change<Item>>, Arc<Seen>, Harness) {
    let (source, tx) = support::Scripted::new(Vec::new(), Revision::ZERO);
    let informer = Informer::builder(source).build().expect("valid");
    let seen = Arc::new(Seen::default());
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("bursts", &informer, Arc::clone(&seen))
            .build()
            .expect("valid"),
    );
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("synced");
    (tx, seen, harness)
}

#[tokio::test(start_paused = true)]
async fn back_to_back_bursts_are_reconciled_once_per_key_at_their_last_version() {
    const KEYS: u64 = 30;
    const PER_KEY: u64 = 100;
    let (tx, seen, mut harness) = start().await;
    // Every burst is in the channel before the informer runs again: one
    // run of input, cut by tokio's budget every 128 events.
    for n in 0..KEYS * PER_KEY {
        let item = Item {
            id: n / PER_KEY,
            value: n % PER_KEY + 1,
            version: Revision::new(n + 1),
        };
        tx.send(Change::Applied(item)).expect("open");
    }
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("settled");
    harness.shutdown().await.expect("clean");
    let seen = seen.0.lock().expect("not poisoned");
    assert_eq!(seen.len(), KEYS as usize);
    for (key, values) in seen.iter() {
        assert_eq!(
            values,
            &[PER_KEY],
            "key {key} was reconciled at a passing version of its burst"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_that_keeps_changing_still_reaches_the_queue_during_its_burst() {
    const CHANGES: u64 = 5_000;
    let (tx, seen, mut harness) = start().await;
    for n in 0..CHANGES {
        let item = Item {
            id: 7,
            value: n + 1,
            version: Revision::new(n + 1),
        };
        tx.send(Change::Applied(item)).expect("open");
    }
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("settled");
    harness.shutdown().await.expect("clean");
    let seen = seen.0.lock().expect("not poisoned");
    let values = &seen[&7];
    assert!(
        values.len() > 1 && values[0] < CHANGES,
        "a key changing without end was held back until its last change: {values:?}"
    );
    assert_eq!(values.last(), Some(&CHANGES));
}
