//! The test harness: settles, reports what is busy, surfaces task failures.

use std::convert::Infallible;
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::MemoryStore;
use tend::testing::{Harness, HarnessError};
use tend::{Informer, Revision};

#[derive(Debug, Clone)]
struct Job {
    name: String,
    hang: bool,
    version: Revision,
}

tend::impl_object!(Job, key: name: String, version: version);

/// Never finishes a job marked `hang`.
struct Runner;

impl Reconciler<Job> for Runner {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Job>) -> Result<Action, Infallible> {
        if ctx.object().is_some_and(|job| job.hang) {
            std::future::pending::<()>().await;
        }
        Ok(Action::RequeueAfter(Duration::from_secs(60)))
    }
}

fn job(name: &str, hang: bool) -> Job {
    Job {
        name: name.into(),
        hang,
        version: Revision::ZERO,
    }
}

fn setup() -> (MemoryStore<Job>, Harness) {
    let jobs = MemoryStore::new("jobs");
    let informer = Informer::builder(jobs.clone()).build().expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("runner", &informer, Runner)
            .build()
            .expect("valid"),
    );
    (jobs, harness)
}

#[tokio::test(start_paused = true)]
async fn settles_when_only_timers_are_left() {
    let (jobs, mut harness) = setup();
    jobs.create(job("a", false)).expect("created");
    harness
        .settle(Duration::from_secs(10))
        .await
        .expect("a requeue timer is not work");
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_stuck_reconcile_is_reported_by_name() {
    let (jobs, mut harness) = setup();
    jobs.create(job("stuck", true)).expect("created");
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
