//! A panicking reconcile is caught, counted and retried; workers live on.
//! (Its own test binary: it silences the panic hook for all its threads.)

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, ControllerObserver, Outcome, Reconciler};
use tend::memory::MemoryStore;
use tend::rate_limit::ExponentialBackoff;
use tend::{Informer, Revision};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
struct Item {
    name: String,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// Panics on the first `panics` calls, then succeeds after a second's work,
/// recording how many reconciles ran at once.
struct Panicky {
    panics: usize,
    calls: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl Reconciler<Item> for Arc<Panicky> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _ctx: Context<Item>) -> Result<Action, Self::Error> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.panics {
            panic!("injected panic");
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(Action::Done)
    }
}

#[derive(Default)]
struct Count {
    panics: AtomicUsize,
    successes: AtomicUsize,
    started: AtomicUsize,
    finished: AtomicUsize,
}

impl ControllerObserver for Count {
    fn reconcile_started(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }

    fn reconcile_finished(&self, outcome: Outcome, _took: Duration) {
        self.finished.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Outcome::Panic => self.panics.fetch_add(1, Ordering::SeqCst),
            Outcome::Success => self.successes.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
    }
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_panics_leave_every_worker_alive() {
    std::panic::set_hook(Box::new(|_| {}));
    const PANICS: usize = 10_000;
    const ITEMS: usize = 50;
    let items = MemoryStore::<Item>::new("items");
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let reconciler = Arc::new(Panicky {
        panics: PANICS,
        calls: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        most_at_once: AtomicUsize::new(0),
    });
    let count = Arc::new(Count::default());
    let controller = Controller::builder("panicky", &informer, Arc::clone(&reconciler))
        .concurrency(NonZeroUsize::new(4).expect("non-zero"))
        .rate_limiter(
            ExponentialBackoff::new(Duration::from_millis(1), Duration::from_millis(10))
                .expect("valid"),
        )
        .observer(count.clone())
        .build()
        .expect("valid");
    let queue = controller.queue();
    let stop = CancellationToken::new();
    let informer_task = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    let run = tokio::spawn(controller.run(stop.clone()));
    for i in 0..ITEMS {
        items
            .client()
            .create(Item {
                name: format!("item-{i}"),
                version: Revision::ZERO,
            })
            .await
            .expect("created");
    }
    timeout(Duration::from_secs(3600), async {
        while count.successes.load(Ordering::SeqCst) < ITEMS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the items were not all reconciled after the panics");
    assert_eq!(count.panics.load(Ordering::SeqCst), PANICS);
    // All four workers survived the panics: four reconciles ran at once.
    assert_eq!(reconciler.most_at_once.load(Ordering::SeqCst), 4);
    assert_eq!(queue.stats().in_flight, 0);
    stop.cancel();
    run.await.expect("task").expect("clean shutdown");
    informer_task.await.expect("task").expect("informer");
}

/// Panics before returning its future on the first call, and in its error
/// policy on the second; succeeds on the third.
struct Eager {
    calls: AtomicUsize,
}

#[derive(Debug)]
struct Boom;

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("boom")
    }
}

impl std::error::Error for Boom {}

impl Reconciler<Item> for Arc<Eager> {
    type Error = Boom;

    #[allow(clippy::manual_async_fn)] // the panic must come before the future exists
    fn reconcile(
        &self,
        _ctx: Context<Item>,
    ) -> impl std::future::Future<Output = Result<Action, Boom>> + Send {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(call != 0, "eager panic");
        async move {
            if call == 1 {
                Err(Boom)
            } else {
                Ok(Action::Done)
            }
        }
    }

    fn error_policy(&self, _error: &Boom) -> tend::controller::ErrorPolicy {
        panic!("error policy panicked");
    }
}

#[tokio::test(start_paused = true)]
async fn panics_before_the_future_and_in_the_error_policy_are_survived() {
    std::panic::set_hook(Box::new(|_| {}));
    let items = MemoryStore::<Item>::new("items");
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let reconciler = Arc::new(Eager {
        calls: AtomicUsize::new(0),
    });
    let count = Arc::new(Count::default());
    let controller = Controller::builder("eager", &informer, Arc::clone(&reconciler))
        .concurrency(std::num::NonZeroUsize::new(1).expect("non-zero"))
        .observer(count.clone())
        .build()
        .expect("valid");
    let queue = controller.queue();
    let mut harness = tend::testing::Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    items
        .client()
        .create(Item {
            name: "x".into(),
            version: Revision::ZERO,
        })
        .await
        .expect("created");
    timeout(Duration::from_secs(3600), async {
        while count.successes.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the key was not retried to success after the panics");
    assert_eq!(reconciler.calls.load(Ordering::SeqCst), 3);
    // Every start is matched by an end, even the one whose error policy
    // panicked: an active-workers gauge does not drift.
    assert_eq!(count.started.load(Ordering::SeqCst), 3);
    assert_eq!(count.finished.load(Ordering::SeqCst), 3);
    assert_eq!(queue.stats().in_flight, 0);
    harness.shutdown().await.expect("clean");
}

/// Hangs on its first call, then succeeds.
struct HangsOnce {
    calls: AtomicUsize,
}

impl Reconciler<Item> for Arc<HangsOnce> {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _ctx: Context<Item>) -> Result<Action, Self::Error> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::future::pending::<()>().await;
        }
        Ok(Action::Done)
    }
}

/// Panics when told of a timeout; counts successes.
#[derive(Default)]
struct PanicsOnTimeout {
    successes: AtomicUsize,
}

impl ControllerObserver for PanicsOnTimeout {
    fn reconcile_finished(&self, outcome: Outcome, _took: Duration) {
        match outcome {
            Outcome::Timeout => panic!("observer panicked on a timeout"),
            Outcome::Success => {
                self.successes.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
    }
}

/// A timeout cancels that reconcile's token; when handling the outcome
/// panics too, the retry still gets a live token and is not cancelled.
#[tokio::test(start_paused = true)]
async fn a_panic_after_a_timeout_does_not_leave_the_worker_cancelled() {
    std::panic::set_hook(Box::new(|_| {}));
    let items = MemoryStore::<Item>::new("items");
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let reconciler = Arc::new(HangsOnce {
        calls: AtomicUsize::new(0),
    });
    let observer = Arc::new(PanicsOnTimeout::default());
    let controller = Controller::builder("hangs", &informer, Arc::clone(&reconciler))
        .concurrency(NonZeroUsize::new(1).expect("non-zero"))
        .reconcile_timeout(Duration::from_secs(1))
        .observer(observer.clone())
        .build()
        .expect("valid");
    let mut harness = tend::testing::Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    items
        .client()
        .create(Item {
            name: "x".into(),
            version: Revision::ZERO,
        })
        .await
        .expect("created");
    timeout(Duration::from_secs(3600), async {
        while observer.successes.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the retry after the timeout never succeeded");
    assert_eq!(reconciler.calls.load(Ordering::SeqCst), 2);
    harness.shutdown().await.expect("clean");
}

/// A rate limiter whose `when` panics the first `panics` times, then waits
/// a minute; counts its calls.
struct PanickingLimiter {
    panics: usize,
    calls: AtomicUsize,
}

impl tend::rate_limit::RateLimiter<String> for PanickingLimiter {
    fn when(&self, _key: &String) -> Duration {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.panics {
            panic!("injected rate limiter panic");
        }
        Duration::from_secs(60)
    }

    fn forget(&self, _key: &String) {}

    fn retries(&self, _key: &String) -> u32 {
        0
    }
}

/// Counts the rate limiter's panics the queue reports.
#[derive(Default)]
struct LimiterPanics(AtomicUsize);

impl tend::QueueObserver for LimiterPanics {
    fn limiter_panicked(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Fails every reconcile until the key has been tried `fails + 1` times.
struct FailsTimes {
    fails: usize,
    calls: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
#[error("injected failure")]
struct Injected;

impl Reconciler<Item> for Arc<FailsTimes> {
    type Error = Injected;

    async fn reconcile(&self, _ctx: Context<Item>) -> Result<Action, Injected> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fails {
            return Err(Injected);
        }
        Ok(Action::Done)
    }
}

/// Runs a controller over one item whose reconcile fails `fails` times,
/// with `limiter`; returns the reconcile calls once it succeeded and the
/// limiter panics reported.
async fn retries_through(limiter: PanickingLimiter, fails: usize) -> (usize, usize) {
    std::panic::set_hook(Box::new(|_| {}));
    let items = MemoryStore::<Item>::new("items");
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let reconciler = Arc::new(FailsTimes {
        fails,
        calls: AtomicUsize::new(0),
    });
    let panics = Arc::new(LimiterPanics::default());
    let count = Arc::new(Count::default());
    let controller = Controller::builder("retries", &informer, Arc::clone(&reconciler))
        .rate_limiter(limiter)
        .queue_observer(panics.clone())
        .observer(count.clone())
        .build()
        .expect("valid");
    let mut harness = tend::testing::Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    items
        .client()
        .create(Item {
            name: "x".into(),
            version: Revision::ZERO,
        })
        .await
        .expect("created");
    timeout(Duration::from_secs(3600), async {
        while count.successes.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the key was never retried to success: stranded by the panicking rate limiter");
    harness.shutdown().await.expect("clean");
    (
        reconciler.calls.load(Ordering::SeqCst),
        panics.0.load(Ordering::SeqCst),
    )
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiter_that_always_panics_still_retries_the_key() {
    let started = tokio::time::Instant::now();
    let limiter = PanickingLimiter {
        panics: usize::MAX,
        calls: AtomicUsize::new(0),
    };
    let (calls, panics) = retries_through(limiter, 5).await;
    assert_eq!(calls, 6, "five failures, then a success");
    assert_eq!(panics, 5, "each retry's panic reported");
    // Each retry waited the fixed fallback delay of 1 s.
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(6)).contains(&took),
        "five fallback delays took {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiter_that_panics_once_costs_only_that_retrys_timing() {
    let started = tokio::time::Instant::now();
    let limiter = PanickingLimiter {
        panics: 1,
        calls: AtomicUsize::new(0),
    };
    let (calls, panics) = retries_through(limiter, 2).await;
    assert_eq!(calls, 3);
    assert_eq!(panics, 1);
    // The first retry after the fallback 1 s, the second after the limiter's
    // own minute.
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(61)..Duration::from_secs(62)).contains(&took),
        "took {took:?}"
    );
}
