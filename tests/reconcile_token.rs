//! A reconcile's cancellation token (`Context::cancelled`) belongs to that
//! reconcile: cancelled by its own timeout and when the controller stops,
//! never by another key.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{wait_until, within};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
struct Item {
    name: String,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// Keeps every reconcile's token by key; keys named `hang*` never return.
#[derive(Default)]
struct Keeps {
    tokens: Mutex<HashMap<String, CancellationToken>>,
}

impl Keeps {
    fn token(&self, key: &str) -> Option<CancellationToken> {
        self.tokens.lock().expect("not poisoned").get(key).cloned()
    }
}

impl Reconciler<Item> for Arc<Keeps> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        let key = ctx.key().clone();
        let hangs = key.starts_with("hang");
        self.tokens
            .lock()
            .expect("not poisoned")
            .insert(key, ctx.cancelled());
        if hangs {
            std::future::pending::<()>().await;
        }
        Ok(Action::Done)
    }
}

fn create(items: &MemoryStore<Item>, name: &str) {
    let item = Item {
        name: name.to_owned(),
        version: Revision::ZERO,
    };
    // The memory client completes at once: no runtime needed.
    futures::executor::block_on(items.client().create(item)).expect("a fresh name");
}

/// One worker, a one-second reconcile timeout, a long shutdown grace.
fn start(items: &MemoryStore<Item>) -> (Harness, Arc<Keeps>) {
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let keeps = Arc::new(Keeps::default());
    let controller = Controller::builder("keeps", &informer, Arc::clone(&keeps))
        .concurrency(NonZeroUsize::MIN)
        .reconcile_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    (harness, keeps)
}

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn another_keys_timeout_does_not_cancel_a_finished_reconciles_token() {
    let items = MemoryStore::new("items");
    let (harness, keeps) = start(&items);
    create(&items, "a");
    wait_until("a reconciled", LIMIT, || keeps.token("a").is_some()).await;
    create(&items, "hang");
    wait_until("hang started", LIMIT, || keeps.token("hang").is_some()).await;
    let hang = keeps.token("hang").expect("kept");
    within("hang's timeout", LIMIT, hang.cancelled()).await;
    let a = keeps.token("a").expect("kept");
    assert!(
        !a.is_cancelled(),
        "hang's timeout cancelled the token of a, which had returned"
    );
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_finished_reconciles_token_is_cancelled_once_the_controller_stops() {
    let items = MemoryStore::new("items");
    let (mut harness, keeps) = start(&items);
    create(&items, "a");
    harness.settle(LIMIT).await.expect("settled");
    let a = keeps.token("a").expect("kept");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!a.is_cancelled(), "cancelled while the controller runs");
    harness.shutdown().await.expect("clean");
    assert!(
        a.is_cancelled(),
        "a finished reconcile's token outlived its controller"
    );
}

#[tokio::test(start_paused = true)]
async fn a_context_kept_past_its_timeout_hands_out_cancelled_tokens() {
    /// Moves its context into a task that asks for a token after the timeout.
    struct Late(tokio::sync::mpsc::UnboundedSender<CancellationToken>);
    impl Reconciler<Item> for Late {
        type Error = std::convert::Infallible;
        async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
            let sender = self.0.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let _ = sender.send(ctx.cancelled());
            });
            std::future::pending().await
        }
    }
    let items = MemoryStore::new("items");
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let (sender, mut late) = tokio::sync::mpsc::unbounded_channel();
    let controller = Controller::builder("late", &informer, Late(sender))
        .concurrency(NonZeroUsize::MIN)
        .reconcile_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    create(&items, "x");
    let token = within("the late token", LIMIT, late.recv())
        .await
        .expect("sent");
    assert!(token.is_cancelled(), "a timed-out reconcile's late token");
    drop(harness);
}
