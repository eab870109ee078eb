//! `hold_while_lagging`: no reconcile starts while the primary cache lags
//! its source past the bound; every held key runs once it catches up.

use super::*;

const PERIOD: Duration = Duration::from_secs(1);
const BOUND: Duration = Duration::from_secs(2);

/// Records when each key's reconciles started.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<(String, Instant)>>>);

impl Reconciler<Set> for Starts {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        self.0
            .lock()
            .expect("not poisoned")
            .push((ctx.key().clone(), Instant::now()));
        Ok(Action::Done)
    }
}

impl Starts {
    fn of(&self, key: &str) -> Vec<Instant> {
        let starts = self.0.lock().expect("not poisoned");
        starts
            .iter()
            .filter(|(k, _)| k == key)
            .map(|&(_, at)| at)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn reconciles_wait_while_the_cache_lags_past_the_bound_and_all_run_after() {
    let sets = MemoryStore::new("sets");
    for name in ["s0", "s1", "s2"] {
        sets.client().create(set(name, 1)).await.expect("created");
    }
    let informer = slow_informer(&sets);
    let starts = Starts::default();
    let controller = Controller::builder("sets", &informer, starts.clone())
        .hold_while_lagging(BOUND)
        .build()
        .unwrap();
    let queue = controller.queue();
    let stop = CancellationToken::new();
    let informer_run = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    let run = tokio::spawn(controller.run(stop.clone()));
    until("the initial reconciles", || {
        ["s0", "s1", "s2"].iter().all(|k| !starts.of(k).is_empty())
    })
    .await;

    let written = Instant::now();
    let mut s0 = sets.get(&"s0".to_owned()).expect("s0");
    s0.replicas = 2;
    let version = sets.client().update(s0).await.expect("updated").version;
    sleep(BOUND + 2 * PERIOD).await;
    let caught_up = || {
        informer
            .cache()
            .get(&"s0".to_owned())
            .is_some_and(|s| s.version == version)
    };
    assert!(!caught_up(), "the seed delays the change past the bound");
    assert!(informer.lag().expect("probed").behind_for > BOUND);
    queue.add("s1".to_owned());
    queue.add("s2".to_owned());
    until("the change arrives", caught_up).await;
    let arrived = Instant::now();
    assert!(arrived > written + BOUND + 2 * PERIOD);
    until("every held key reconciled", || {
        ["s0", "s1", "s2"].iter().all(|k| starts.of(k).len() >= 2)
    })
    .await;
    for key in ["s0", "s1", "s2"] {
        let held = starts.of(key)[1];
        assert!(
            held >= arrived - Duration::from_millis(10),
            "{key} started at {:?} before the cache caught up",
            arrived - held
        );
        assert!(
            held <= arrived + Duration::from_millis(200),
            "{key} released within two rechecks"
        );
    }
    stop_controller(&stop, run).await;
    informer_run.await.unwrap().unwrap();
}

/// An informer probing every [`PERIOD`] over `sets`, whose watches deliver
/// each run of changes up to 30 s late.
fn slow_informer(sets: &MemoryStore<Set>) -> Informer<Set> {
    let faults = Faults {
        seed: 3,
        delay: Some(Duration::from_secs(30)),
        ..Faults::default()
    };
    sets.set_faults(faults).expect("valid faults");
    Informer::builder(sets.clone())
        .lag_probe_every(PERIOD)
        .build()
        .unwrap()
}

/// Waits (bounded) until `done`, every 10 ms.
async fn until(what: &str, done: impl Fn() -> bool) {
    timeout(LIMIT, async {
        while !done() {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

#[test]
fn a_zero_bound_is_refused() {
    let sets = MemoryStore::<Set>::new("sets");
    let informer = Informer::builder(sets).build().unwrap();
    let refused = Controller::builder("sets", &informer, Starts::default())
        .hold_while_lagging(Duration::ZERO)
        .build();
    assert!(matches!(
        refused,
        Err(ControllerError::InvalidConfig {
            setting: tend::controller::ControllerSetting::HoldWhileLagging,
            ..
        })
    ));
}
