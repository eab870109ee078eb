//! The test harness: settles, reports what is busy, surfaces task failures.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler, Triggers};
use tend::memory::MemoryStore;
use tend::testing::{Harness, HarnessError};
use tend::{Informer, Revision, WorkQueue};
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Job {
    name: String,
    hang: bool,
    version: Revision,
}

tend::impl_object!(Job, key: name: String, version: version);

/// How long a job takes, and how soon it runs again.
const WORK: Duration = Duration::from_secs(1);
const REQUEUE: Duration = Duration::from_secs(60);

/// Works on a job for [`WORK`] and runs it again after [`REQUEUE`]; never
/// finishes a job marked `hang`. Counts the reconciles it finished.
struct Runner(Arc<AtomicUsize>);

impl Reconciler<Job> for Runner {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Job>) -> Result<Action, Infallible> {
        if ctx.object().is_some_and(|job| job.hang) {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(WORK).await;
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Action::RequeueAfter(REQUEUE))
    }
}

fn job(name: &str, hang: bool) -> Job {
    Job {
        name: name.into(),
        hang,
        version: Revision::ZERO,
    }
}

/// A harness running a `Runner` on `jobs`.
struct Setup {
    jobs: MemoryStore<Job>,
    harness: Harness,
    queue: WorkQueue<String, Triggers>,
    finished: Arc<AtomicUsize>,
}

fn setup() -> Setup {
    let jobs = MemoryStore::new("jobs");
    let informer = Informer::builder(jobs.clone()).build().expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    let finished = Arc::new(AtomicUsize::new(0));
    let controller = Controller::builder("runner", &informer, Runner(Arc::clone(&finished)))
        .build()
        .expect("valid");
    let queue = controller.queue();
    harness.controller(controller);
    Setup {
        jobs,
        harness,
        queue,
        finished,
    }
}

#[tokio::test(start_paused = true)]
async fn settles_when_only_timers_are_left() {
    let Setup {
        jobs,
        mut harness,
        queue,
        finished,
    } = setup();
    jobs.client()
        .create(job("a", false))
        .await
        .expect("created");
    let start = Instant::now();
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("a requeue timer is not work");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the job's reconcile ended"
    );
    let stats = queue.stats();
    assert_eq!(
        (stats.ready, stats.in_flight, stats.scheduled),
        (0, 0, 1),
        "only the requeue timer is left"
    );
    assert!(
        start.elapsed() < REQUEUE,
        "settled before the timer fired: {:?}",
        start.elapsed()
    );
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_stuck_reconcile_is_reported_by_name() {
    let Setup {
        jobs, mut harness, ..
    } = setup();
    jobs.client()
        .create(job("stuck", true))
        .await
        .expect("created");
    let err = harness
        .settle(Duration::from_secs(10))
        .await
        .expect_err("a hanging reconcile never settles");
    assert!(matches!(err, HarnessError::NotSettled { .. }));
    assert_eq!(
        err.to_string(),
        "not settled within 10s: controller `runner` has 0 ready and 1 in-flight keys"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_task_is_surfaced() {
    let jobs = MemoryStore::<Job>::new("jobs");
    let informer = Informer::builder(jobs).build().expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    // Running one informer twice is refused.
    harness.informer(&informer);
    let err = harness
        .settle(Duration::from_secs(10))
        .await
        .expect_err("the second run fails");
    assert!(matches!(err, HarnessError::TaskFailed { .. }), "{err}");
    assert!(err.to_string().contains("jobs"), "{err}");
}
