//! Runs of keys: panics, hangs and aborts mid-run.

use super::*;

/// Keys gathered from a run of watch events reach the queue even when a
/// later event of the run panics in the informer (here, its transform).
#[tokio::test(start_paused = true)]
async fn keys_gathered_before_a_panic_in_the_informer_are_not_lost() {
    let sets = MemoryStore::<Set>::new("sets");
    let informer = Informer::builder(sets.clone())
        .transform(|s: Set| {
            assert!(s.name != "boom", "transform panicked");
            s
        })
        .build()
        .expect("valid");
    let probe = Arc::new(Probe::default());
    let controller = Controller::builder("sets", &informer, Arc::clone(&probe))
        .build()
        .expect("valid");
    let stop = CancellationToken::new();
    let informer_task = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    let run = tokio::spawn(controller.run(stop.clone()));
    timeout(LIMIT, async {
        while !informer.is_synced() {
            sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the informer did not sync");
    // Three writes read by the watch in one run; the third panics.
    for name in ["a", "b", "boom"] {
        sets.client().create(set(name, 1)).await.expect("created");
    }
    let died = timeout(LIMIT, informer_task).await.expect("informer task");
    assert!(died.is_err(), "the transform's panic ends the informer");
    timeout(LIMIT, async {
        while probe.runs_of("a").is_empty() || probe.runs_of("b").is_empty() {
            sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the keys gathered before the panic were never reconciled");
    stop_controller(&stop, run).await;
}

/// Reconciles at once, except keys starting with `h`, which wait for ever.
/// Counts calls, remembers the keys reconciled, and whether one hangs.
#[derive(Default)]
struct HangOnH {
    calls: AtomicUsize,
    quick: Mutex<HashSet<String>>,
    hanging: AtomicBool,
}

impl Reconciler<Set> for Arc<HangOnH> {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if ctx.key().starts_with('h') {
            self.hanging.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.quick
            .lock()
            .expect("not poisoned")
            .insert(ctx.key().clone());
        Ok(Action::Done)
    }
}

/// Workers take quick keys in runs; a reconcile that waits hands the rest of
/// its run back, so a hanging key never holds other keys from free workers.
#[tokio::test(start_paused = true)]
async fn a_hanging_reconcile_in_a_run_of_keys_holds_back_no_other_key() {
    let mut world = World::new(None);
    world.create_sets("h", 8).await;
    world.create_sets("q", 192).await;
    let reconciler = Arc::new(HangOnH::default());
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&reconciler))
            .concurrency(NonZeroUsize::new(16).expect("non-zero"))
            .shutdown_grace(Duration::from_secs(1))
            .build()
            .expect("valid"),
    );
    world
        .until("every quick key reconciled", |_| {
            reconciler.quick.lock().expect("not poisoned").len() == 192
        })
        .await;
    world.shut_down().await;
}

/// While a reconcile of a run waits, the keys of the run processed before
/// it are done (not held in flight) and the rest are back in the queue.
#[tokio::test(start_paused = true)]
async fn a_waiting_reconcile_holds_no_other_key_of_its_run_in_flight() {
    let world = World::new(None);
    world.create_sets("q", 60).await;
    world.create_set("hang", 0).await;
    let reconciler = Arc::new(HangOnH::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&reconciler))
        .concurrency(NonZeroUsize::new(1).expect("non-zero"))
        .shutdown_grace(Duration::from_secs(1))
        .build()
        .expect("valid");
    let queue = controller.queue();
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    world
        .until("the hanging key started", |_| {
            reconciler.hanging.load(Ordering::SeqCst)
        })
        .await;
    let in_flight: Vec<String> = queue.in_flight().into_iter().map(|k| k.key).collect();
    assert_eq!(in_flight, ["hang"]);
    stop_controller(&stop, run).await;
    world.shut_down().await;
}

/// A controller whose task is aborted (its `run` future dropped) while a
/// worker holds a run of keys leaves none of them in flight.
#[tokio::test(start_paused = true)]
async fn aborting_a_controller_mid_run_leaves_no_key_in_flight() {
    let world = World::new(None);
    world.create_sets("q", 1_000).await;
    let reconciler = Arc::new(HangOnH::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&reconciler))
        .concurrency(NonZeroUsize::new(1).expect("non-zero"))
        .build()
        .expect("valid");
    let queue = controller.queue();
    let run = tokio::spawn(controller.run(CancellationToken::new()));
    // Yields, not sleeps: the paused clock would only move once all is done.
    timeout(LIMIT, async {
        while reconciler.calls.load(Ordering::SeqCst) < 200 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("no reconcile ran");
    run.abort();
    assert!(
        timeout(LIMIT, run).await.expect("abort").is_err(),
        "aborted"
    );
    assert!(reconciler.calls.load(Ordering::SeqCst) < 1_000, "mid-way");
    assert_eq!(queue.stats().in_flight, 0);
    world.shut_down().await;
}
