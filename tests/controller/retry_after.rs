//! Errors that say when to retry: `ErrorPolicy::RetryAfter`.

use tend::SettingError;
use tend::controller::{ControllerObserver, ControllerSetting, Outcome};

use super::*;

/// Fails as scripted: each call takes the next entry (`Some(delay)`: an
/// error that says when, `None`: one that does not); succeeds after the
/// script. Records each run's attempt and start.
#[derive(Default)]
struct Scripted {
    script: Mutex<Vec<Option<Duration>>>,
    runs: Mutex<Vec<(u32, Instant)>>,
}

#[derive(Debug)]
struct Throttled(Option<Duration>);

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "throttled, retry after {:?}", self.0)
    }
}

impl std::error::Error for Throttled {}

impl Scripted {
    fn new(script: &[Option<Duration>]) -> Arc<Self> {
        let mut script = script.to_vec();
        script.reverse();
        Arc::new(Self {
            script: Mutex::new(script),
            runs: Mutex::default(),
        })
    }

    /// The gaps between consecutive runs' starts, and each run's attempt.
    fn gaps_and_attempts(&self) -> (Vec<Duration>, Vec<u32>) {
        let runs = self.runs.lock().expect("not poisoned");
        let gaps = runs.windows(2).map(|w| w[1].1 - w[0].1).collect();
        (gaps, runs.iter().map(|r| r.0).collect())
    }
}

impl Reconciler<Set> for Arc<Scripted> {
    type Error = Throttled;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Throttled> {
        let now = Instant::now();
        self.runs
            .lock()
            .expect("not poisoned")
            .push((ctx.attempt(), now));
        match self.script.lock().expect("not poisoned").pop() {
            Some(delay) => Err(Throttled(delay)),
            None => Ok(Action::Done),
        }
    }

    fn error_policy(&self, error: &Throttled) -> ErrorPolicy {
        error.0.map_or(ErrorPolicy::Retry, ErrorPolicy::RetryAfter)
    }
}

/// Counts the reconciles that ended as errors.
#[derive(Default)]
struct Errors(AtomicUsize);

impl ControllerObserver for Errors {
    fn reconcile_finished(&self, outcome: Outcome, _took: Duration) {
        if outcome == Outcome::Error {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Runs `script` on one key to its end, with the builder's
/// `max_retry_after` when given; returns the gaps, attempts and errors.
async fn run_script(
    script: &[Option<Duration>],
    max_retry_after: Option<Duration>,
) -> (Vec<Duration>, Vec<u32>, usize) {
    let mut world = World::new(None);
    let scripted = Scripted::new(script);
    let errors = Arc::new(Errors::default());
    let mut builder = Controller::builder("sets", &world.set_informer, Arc::clone(&scripted))
        .observer(Arc::clone(&errors) as Arc<dyn ControllerObserver>);
    if let Some(bound) = max_retry_after {
        builder = builder.max_retry_after(bound);
    }
    world.spawn(builder.build().expect("valid"));
    world.create_set("a", 1).await;
    let runs = script.len() + 1;
    // Longer than `until`'s limit: the default cap is 1000 s.
    let ran_out = async {
        while scripted.runs.lock().expect("not poisoned").len() < runs {
            sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(Duration::from_secs(7200), ran_out)
        .await
        .expect("timed out waiting for the script to run out");
    world.shut_down().await;
    let (gaps, attempts) = scripted.gaps_and_attempts();
    (gaps, attempts, errors.0.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn an_error_that_says_when_waits_that_long_and_still_counts_as_a_failure() {
    let (s, ms) = (Duration::from_secs, Duration::from_millis);
    let (gaps, attempts, errors) = run_script(&[None, Some(s(30)), Some(s(2)), None], None).await;
    // 5 ms for the first failure, then the errors' own delays, then the
    // backoff of a fourth failure: the two that said when were counted.
    assert_eq!(gaps, [ms(5), s(30), s(2), ms(40)]);
    assert_eq!(attempts, [1, 2, 3, 4, 5]);
    assert_eq!(errors, 4, "every error counted, delay or not");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_delay_is_bounded_both_ways() {
    let (s, ms) = (Duration::from_secs, Duration::from_millis);
    let script = [Some(Duration::MAX), Some(Duration::ZERO), Some(s(90))];
    let (gaps, _, _) = run_script(&script, Some(s(60))).await;
    assert_eq!(gaps, [s(60), ms(1), s(60)], "capped, floored, capped");
    let (gaps, _, _) = run_script(&[Some(Duration::MAX)], None).await;
    assert_eq!(gaps, [s(1000)], "the default cap");
    // A cap below the floor: the floor wins, nothing panics.
    let (gaps, _, _) = run_script(&[Some(s(5))], Some(Duration::from_nanos(1))).await;
    assert_eq!(gaps, [ms(1)]);
}

#[tokio::test(start_paused = true)]
async fn success_after_a_retry_after_forgets_its_failures() {
    let s = Duration::from_secs;
    let mut world = World::new(None);
    let scripted = Scripted::new(&[Some(s(10)), Some(s(10))]);
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&scripted))
        .build()
        .expect("valid");
    world.spawn(controller);
    world.create_set("a", 1).await;
    world
        .until("three runs", |_| {
            scripted.runs.lock().expect("not poisoned").len() == 3
        })
        .await;
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("a fourth run", |_| {
            scripted.runs.lock().expect("not poisoned").len() == 4
        })
        .await;
    let (_, attempts) = scripted.gaps_and_attempts();
    assert_eq!(attempts, [1, 2, 3, 1]);
    world.shut_down().await;
}

#[test]
fn a_zero_max_retry_after_is_refused() {
    let world = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async { World::new(None) });
    let built = Controller::builder("sets", &world.set_informer, Scripted::new(&[]))
        .max_retry_after(Duration::ZERO)
        .build();
    assert!(
        matches!(
            built,
            Err(ControllerError::InvalidConfig {
                setting: ControllerSetting::MaxRetryAfter,
                error: SettingError::Zero,
                ..
            })
        ),
        "{built:?}"
    );
}
