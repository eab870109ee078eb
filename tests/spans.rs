//! The reconcile span's fields. Its own test binary with the one test, so
//! the recording subscriber can be the global default: a scoped one races
//! with other tests over tracing's cached callsite interest.

#[path = "support/spans.rs"]
mod spans;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision};

#[derive(Debug, Clone)]
struct Set {
    name: String,
    version: Revision,
}

tend::impl_object!(Set, key: name: String, version: version);

/// Fails its first reconcile, then succeeds.
#[derive(Default)]
struct FailsOnce(AtomicUsize);

#[derive(Debug, thiserror::Error)]
#[error("injected failure")]
struct Injected;

impl Reconciler<Set> for Arc<FailsOnce> {
    type Error = Injected;

    async fn reconcile(&self, _ctx: Context<Set>) -> Result<Action, Injected> {
        tracing::info!("reconciling");
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(Injected);
        }
        Ok(Action::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn the_reconcile_span_names_the_controller_key_attempt_and_triggers() {
    let spans = spans::Spans::default();
    tracing::subscriber::set_global_default(spans.clone()).expect("the only subscriber");
    let sets = MemoryStore::new("sets");
    let informer = Informer::builder(sets.clone()).build().expect("valid");
    let reconciler = Arc::new(FailsOnce::default());
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("sets", &informer, Arc::clone(&reconciler))
            .build()
            .expect("valid"),
    );
    sets.client()
        .create(Set {
            name: "a".into(),
            version: Revision::ZERO,
        })
        .await
        .expect("created");
    support::wait_until("the retry", Duration::from_secs(60), || {
        reconciler.0.load(Ordering::SeqCst) == 2
    })
    .await;
    harness.shutdown().await.expect("clean");
    let span = |attempt: &str, trigger: &str| {
        [
            ("controller", "sets"),
            ("key", "\"a\""),
            ("attempt", attempt),
            ("trigger", trigger),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .into()
    };
    let expected: Vec<spans::Fields> = vec![span("1", "initial"), span("2", "retry")];
    assert_eq!(spans.named("reconcile"), expected);
    assert_eq!(
        spans.events_in("spans", "reconcile"),
        2,
        "each reconcile runs inside its span"
    );
}
