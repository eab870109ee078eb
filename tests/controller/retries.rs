//! Retries, terminal errors and requeue durations.

use super::*;

#[tokio::test(start_paused = true)]
async fn errors_are_retried_on_the_exponential_schedule_and_reset_by_success() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        fail_first: 4,
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world
        .until("5 runs", |_| probe.runs_of("a").len() == 5)
        .await;
    let runs = probe.runs_of("a");
    let gaps: Vec<_> = runs.windows(2).map(|w| w[1].2 - w[0].2).collect();
    let ms = Duration::from_millis;
    assert_eq!(gaps, [ms(5), ms(10), ms(20), ms(40)]);
    let attempts: Vec<_> = runs.iter().map(|r| r.1).collect();
    assert_eq!(attempts, [1, 2, 3, 4, 5]);
    assert!(runs[1].0.contains(&Trigger::Retry));
    // Success forgot the failures: the next change starts at attempt 1.
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("6 runs", |_| probe.runs_of("a").len() == 6)
        .await;
    assert_eq!(probe.runs_of("a")[5].1, 1);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_not_retried() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        fail_first: usize::MAX,
        terminal: true,
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world
        .until("one run", |_| probe.runs_of("a").len() == 1)
        .await;
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(probe.runs_of("a").len(), 1);
    world.shut_down().await;
}

/// Counts reconciles that ended in a panic (in the reconcile or in handling
/// its outcome).
#[derive(Default)]
struct Panics(AtomicUsize);

impl tend::controller::ControllerObserver for Panics {
    fn reconcile_finished(&self, outcome: tend::controller::Outcome, _took: Duration) {
        if outcome == tend::controller::Outcome::Panic {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_requeue_or_retry_after_duration_max_waits_until_the_next_change() {
    let mut world = World::new(None);
    let requeues = Arc::new(Probe {
        requeue: Some(Duration::MAX),
        ..Probe::default()
    });
    let retries = Arc::new(Probe {
        fail_first: usize::MAX,
        ..Probe::default()
    });
    let no_cap = tend::rate_limit::ExponentialBackoff::new(Duration::MAX, Duration::MAX)
        .and_then(|backoff| backoff.jitter(1.0))
        .expect("valid");
    let panics = Arc::new(Panics::default());
    world.spawn(
        Controller::builder("requeues", &world.set_informer, Arc::clone(&requeues))
            .observer(panics.clone())
            .build()
            .expect("valid"),
    );
    world.spawn(
        Controller::builder("retries", &world.set_informer, Arc::clone(&retries))
            .rate_limiter(no_cap)
            .observer(panics.clone())
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    let runs = |probe: &Arc<Probe>, n: usize| {
        let probe = Arc::clone(probe);
        move |_: &World| probe.runs_of("a").len() >= n
    };
    world.until("the first runs", runs(&requeues, 1)).await;
    world.until("the first runs", runs(&retries, 1)).await;
    sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(requeues.runs_of("a").len(), 1, "no requeue within a day");
    assert_eq!(retries.runs_of("a").len(), 1, "no retry within a day");

    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("a change runs it again", runs(&requeues, 2))
        .await;
    world
        .until("a change runs it again", runs(&retries, 2))
        .await;
    assert_eq!(panics.0.load(Ordering::SeqCst), 0, "no arithmetic panicked");
    world.shut_down().await;
}
