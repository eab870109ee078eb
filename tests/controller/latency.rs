//! `ControllerObserver::reconcile_latency`: from what woke a reconcile to
//! its start, on the paused clock — the debounce window, the wait behind the
//! key's running reconcile, and a requeue counted from when it was due.

use super::*;
use tend::controller::{ControllerObserver, Triggers};

/// Every latency observed, with its triggers.
#[derive(Default)]
struct Latencies(Mutex<Vec<(String, Duration)>>);

impl ControllerObserver for Latencies {
    fn reconcile_latency(&self, triggers: Triggers, latency: Duration) {
        self.0
            .lock()
            .expect("not poisoned")
            .push((triggers.to_string(), latency));
    }
}

impl Latencies {
    fn take(&self) -> Vec<(String, Duration)> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

/// `slow` takes 5 s; `requeue` asks to run again in 10 s, once; others return at once.
struct Timed(AtomicUsize);

impl Reconciler<Set> for Timed {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        match ctx.key().as_str() {
            "slow" => sleep(Duration::from_secs(5)).await,
            "requeue" if self.0.fetch_add(1, Ordering::Relaxed) == 0 => {
                return Ok(Action::RequeueAfter(Duration::from_secs(10)));
            }
            _ => {}
        }
        Ok(Action::Done)
    }
}

async fn update(sets: &MemoryStore<Set>, name: &str) {
    let mut set = sets.get(&name.to_owned()).expect("exists");
    set.replicas += 1;
    sets.client().update(set).await.expect("updated");
}

/// A controller over `sets`, running until `stop`.
struct Running {
    latencies: Arc<Latencies>,
    stop: CancellationToken,
    run: JoinHandle<Result<(), ControllerError>>,
    informer: JoinHandle<Result<(), InformerError>>,
}

type Builder = tend::controller::ControllerBuilder<Set, Timed>;

fn start(sets: &MemoryStore<Set>, configure: impl FnOnce(Builder) -> Builder) -> Running {
    let informer = Informer::builder(sets.clone()).build().unwrap();
    let latencies = Arc::new(Latencies::default());
    let builder = Controller::builder("sets", &informer, Timed(AtomicUsize::new(0)))
        .observer(latencies.clone());
    let controller = configure(builder).build().unwrap();
    let stop = CancellationToken::new();
    let informer_run = tokio::spawn({
        let stop = stop.clone();
        async move { informer.run(stop).await }
    });
    Running {
        latencies,
        stop: stop.clone(),
        run: tokio::spawn(controller.run(stop)),
        informer: informer_run,
    }
}

impl Running {
    async fn stop(self) {
        stop_controller(&self.stop, self.run).await;
        self.informer.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_debounced_change_waits_from_its_first_change() {
    let sets = MemoryStore::new("sets");
    sets.client().create(set("a", 1)).await.unwrap();
    let running = start(&sets, |b| b.debounce(Duration::from_secs(1)));
    let latencies = &running.latencies;
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        latencies.take(),
        [("initial".to_owned(), Duration::ZERO)],
        "the list is queued at once"
    );

    update(&sets, "a").await;
    sleep(Duration::from_millis(500)).await;
    update(&sets, "a").await; // pushes the window to 1.5 s after the first
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        latencies.take(),
        [("changed".to_owned(), Duration::from_millis(1500))]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_change_during_a_reconcile_waits_for_it_and_a_requeue_counts_from_when_due() {
    let sets = MemoryStore::new("sets");
    sets.client().create(set("slow", 1)).await.unwrap();
    sets.client().create(set("requeue", 1)).await.unwrap();
    let running = start(&sets, |b| b.read_your_writes(None));
    let latencies = &running.latencies;
    sleep(Duration::from_secs(1)).await;
    update(&sets, "slow").await; // its first reconcile runs until 5 s
    sleep(Duration::from_secs(20)).await;
    let seen = latencies.take();
    let slow: Vec<_> = seen.iter().filter(|(t, _)| t == "changed").collect();
    assert_eq!(
        slow,
        [&("changed".to_owned(), Duration::from_secs(4))],
        "{seen:?}"
    );
    let requeued: Vec<_> = seen.iter().filter(|(t, _)| t == "requeue").collect();
    assert_eq!(
        requeued,
        [&("requeue".to_owned(), Duration::ZERO)],
        "{seen:?}"
    );
    assert_eq!(
        seen.len(),
        4,
        "two initial, one change, one requeue: {seen:?}"
    );
    running.stop().await;
}
