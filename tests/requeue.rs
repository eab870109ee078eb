//! Requeues: `Action::Requeue` backs off, a zero `RequeueAfter` is no busy
//! loop, and `Harness::settle` returns within its bound however busy the
//! controllers are.

mod support;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{wait_until, within};
use tend::controller::{
    Action, Context, Controller, ControllerObserver, Outcome, Reconciler, Trigger,
};
use tend::memory::MemoryStore;
use tend::testing::{Harness, HarnessError};
use tend::{Informer, Revision};
use tokio::time::Instant;

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

/// One reconcile as seen: key, attempt, whether it was a requeue or a
/// retry, and when.
#[derive(Debug, Clone)]
struct Run {
    key: String,
    attempt: u32,
    requeue: bool,
    retry: bool,
    at: Instant,
}

/// Answers `action(key, runs of that key so far)`, recording every run.
struct Scripted<F> {
    action: F,
    runs: Mutex<Vec<Run>>,
}

impl<F> Scripted<F> {
    fn runs(&self, key: &str) -> Vec<Run> {
        let runs = self.runs.lock().expect("not poisoned");
        runs.iter().filter(|run| run.key == key).cloned().collect()
    }
}

impl<F: Fn(&str, usize) -> Action + Send + Sync + 'static> Reconciler<Item> for Arc<Scripted<F>> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        let key = ctx.key().clone();
        let mut runs = self.runs.lock().expect("not poisoned");
        let before = runs.iter().filter(|run| run.key == key).count();
        runs.push(Run {
            key: key.clone(),
            attempt: ctx.attempt(),
            requeue: ctx.triggers().contains(Trigger::Requeue),
            retry: ctx.triggers().contains(Trigger::Retry),
            at: Instant::now(),
        });
        drop(runs);
        Ok((self.action)(&key, before))
    }
}

/// Counts outcomes.
#[derive(Default)]
struct Outcomes(Mutex<Vec<Outcome>>);

impl ControllerObserver for Outcomes {
    fn reconcile_finished(&self, outcome: Outcome, _took: Duration) {
        self.0.lock().expect("not poisoned").push(outcome);
    }
}

fn start<F: Fn(&str, usize) -> Action + Send + Sync + 'static>(
    items: &MemoryStore<Item>,
    action: F,
) -> (Harness, Arc<Scripted<F>>, Arc<Outcomes>) {
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let script = Arc::new(Scripted {
        action,
        runs: Mutex::new(Vec::new()),
    });
    let outcomes = Arc::new(Outcomes::default());
    let controller = Controller::builder("scripted", &informer, Arc::clone(&script))
        .concurrency(NonZeroUsize::MIN)
        .observer(outcomes.clone())
        .build()
        .expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    (harness, script, outcomes)
}

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `scenario` on a paused clock on a thread of its own, failing the
/// test after 30 s of real time: a busy loop stops the paused clock, and no
/// tokio timer (so no bounded wait) fires then.
fn on_a_paused_clock<T: Send + 'static>(
    what: &str,
    scenario: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let (sender, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let _ = sender.send(runtime.block_on(scenario));
    });
    match result.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => out,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after 30 s of real time (a busy loop?)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{what}: the scenario panicked (see its message above)")
        }
    }
}

#[tokio::test(start_paused = true)]
async fn requeue_waits_the_keys_backoff_and_reports_a_requeue() {
    let items = MemoryStore::new("items");
    // Three requeues, then done.
    let (mut harness, script, outcomes) = start(&items, |_, runs| {
        if runs < 3 {
            Action::Requeue
        } else {
            Action::Done
        }
    });
    items.client().create(item("a")).await.expect("created");
    harness.settle(LIMIT).await.expect("settled");
    let runs = script.runs("a");
    assert_eq!(runs.len(), 4, "{runs:?}");
    let attempts: Vec<u32> = runs.iter().map(|run| run.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4], "requeues count as attempts");
    // The default limiter's backoff: 5 ms, doubling.
    let gaps: Vec<Duration> = runs.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert_eq!(
        gaps,
        [5, 10, 20].map(Duration::from_millis),
        "each requeue waits longer"
    );
    assert!(
        runs[1..].iter().all(|run| run.requeue && !run.retry),
        "{runs:?}"
    );
    let outcomes = outcomes.0.lock().expect("not poisoned").clone();
    assert_eq!(
        outcomes,
        [
            Outcome::Requeue,
            Outcome::Requeue,
            Outcome::Requeue,
            Outcome::Success
        ]
    );
    // Done reset the backoff: the next change is a first attempt.
    let current = items.get(&"a".to_owned()).expect("exists");
    items.client().update(current).await.expect("updated");
    harness.settle(LIMIT).await.expect("settled");
    assert_eq!(script.runs("a").last().map(|run| run.attempt), Some(1));
    harness.shutdown().await.expect("clean");
}

#[test]
fn a_zero_requeue_delay_waits_a_millisecond_and_starves_no_other_key() {
    on_a_paused_clock("the zero-delay loop", zero_requeue_delay());
}

async fn zero_requeue_delay() {
    let items = MemoryStore::new("items");
    let (harness, script, _) = start(&items, |key, _| {
        if key == "loop" {
            Action::RequeueAfter(Duration::ZERO)
        } else {
            Action::Done
        }
    });
    items.client().create(item("loop")).await.expect("created");
    wait_until("the loop ran 10 times", LIMIT, || {
        script.runs("loop").len() >= 10
    })
    .await;
    items.client().create(item("other")).await.expect("created");
    wait_until("the other key reconciled", LIMIT, || {
        !script.runs("other").is_empty()
    })
    .await;
    let runs = script.runs("loop");
    assert!(
        runs.windows(2)
            .all(|w| w[1].at - w[0].at >= Action::MIN_REQUEUE_DELAY),
        "a zero requeue delay ran the key again at once"
    );
    harness.shutdown().await.expect("clean");
}

/// Writes its own object on every reconcile: a loop through the store and
/// the informer that never lets the runtime idle, so tokio's paused clock
/// stops.
struct Rewrites(MemoryStore<Item>);

impl Reconciler<Item> for Rewrites {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Self::Error> {
        if let Some(object) = ctx.object() {
            let _ = self.0.client().update((**object).clone()).await;
        }
        Ok(Action::Done)
    }
}

#[test]
fn settle_returns_within_its_bound_when_the_runtime_never_idles() {
    // Before the fix `settle` hung for ever on the stopped paused clock.
    let settled = on_a_paused_clock("settle(1 s)", async {
        let items = MemoryStore::new("items");
        let informer = Informer::builder(items.clone()).build().expect("valid");
        let mut harness = Harness::new();
        harness.wall_clock_floor(Duration::from_secs(1));
        harness.informer(&informer);
        harness.controller(
            Controller::builder("rewrites", &informer, Rewrites(items.clone()))
                .build()
                .expect("valid"),
        );
        items.client().create(item("a")).await.expect("created");
        within("settle", LIMIT, harness.settle(Duration::from_secs(1))).await
    });
    match settled {
        // Either the controller was seen busy, or every look fell between
        // its runs (the informer yields once a run's keys are queued) and
        // only the clock standing still tells.
        Err(HarnessError::NotSettled { busy, .. }) => {
            assert!(
                busy.contains("rewrites") || busy.contains("never idled"),
                "{busy}"
            );
        }
        other => panic!("a controller rewriting its object settled: {other:?}"),
    }
}

#[test]
fn a_requeue_through_a_limiter_that_answers_zero_is_no_busy_loop() {
    on_a_paused_clock("requeues through a zero-delay limiter", async {
        let items = MemoryStore::new("items");
        let informer = Informer::builder(items.clone()).build().expect("valid");
        let script = Arc::new(Scripted {
            action: |_: &str, runs: usize| {
                if runs < 50 {
                    Action::Requeue
                } else {
                    Action::Done
                }
            },
            runs: Mutex::new(Vec::new()),
        });
        // A bucket this large answers zero for every retry.
        let huge = std::num::NonZeroU32::MAX;
        let controller = Controller::builder("zero", &informer, Arc::clone(&script))
            .rate_limiter(tend::rate_limit::TokenBucket::new(huge, huge))
            .build()
            .expect("valid");
        let mut harness = Harness::new();
        harness.informer(&informer);
        harness.controller(controller);
        items.client().create(item("a")).await.expect("created");
        harness.settle(LIMIT).await.expect("settled");
        let runs = script.runs("a");
        assert_eq!(runs.len(), 51);
        assert!(
            runs.windows(2)
                .all(|w| w[1].at - w[0].at >= Action::MIN_REQUEUE_DELAY),
            "a requeue ran again at once"
        );
        harness.shutdown().await.expect("clean");
    });
}

/// Initial-list keys fail (or ask for a requeue) once; the first retry
/// creates a fresh object. Returns the order of the reconciles after the
/// first pass.
async fn fresh_change_among_background_retries(requeue: bool) -> Vec<String> {
    #[derive(Debug, thiserror::Error)]
    #[error("injected")]
    struct Injected;
    struct FailsFirst {
        items: MemoryStore<Item>,
        requeue: bool,
        order: Mutex<Vec<String>>,
    }
    impl Reconciler<Item> for Arc<FailsFirst> {
        type Error = Injected;
        async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Injected> {
            let key = ctx.key().clone();
            if key.starts_with("bg") && ctx.attempt() == 1 {
                return if self.requeue {
                    Ok(Action::Requeue)
                } else {
                    Err(Injected)
                };
            }
            if key == "bg-00" {
                // Waits for the fresh change to reach the queue (a waiting
                // reconcile hands the rest of its run back).
                self.items
                    .client()
                    .create(item("fresh"))
                    .await
                    .expect("created");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            self.order.lock().expect("not poisoned").push(key);
            Ok(Action::Done)
        }
    }
    let items = MemoryStore::new("items");
    for i in 0..40 {
        items
            .client()
            .create(item(&format!("bg-{i:02}")))
            .await
            .expect("created");
    }
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let reconciler = Arc::new(FailsFirst {
        items: items.clone(),
        requeue,
        order: Mutex::new(Vec::new()),
    });
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("bg", &informer, Arc::clone(&reconciler))
            .concurrency(NonZeroUsize::MIN)
            .build()
            .expect("valid"),
    );
    harness.settle(LIMIT).await.expect("settled");
    harness.shutdown().await.expect("clean");
    reconciler.order.lock().expect("not poisoned").clone()
}

#[tokio::test(start_paused = true)]
async fn a_background_key_keeps_its_priority_through_retries_and_requeues() {
    for requeue in [false, true] {
        let order = fresh_change_among_background_retries(requeue).await;
        assert_eq!(order.len(), 41, "{order:?}");
        let fresh = order.iter().position(|k| k == "fresh").expect("reconciled");
        // The fresh change goes right after the retry that made it, ahead
        // of the background retries still queued.
        let made = order.iter().position(|k| k == "bg-00").expect("reconciled");
        assert_eq!(
            fresh,
            made + 1,
            "requeue: {requeue}: the fresh change waited behind background retries: {order:?}"
        );
    }
}
