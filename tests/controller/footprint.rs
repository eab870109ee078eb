//! `Controller::footprint`: the per-key tables grow with what is pending
//! and go back to nothing once it is done.

use super::*;
use tend::controller::TableSizes;

/// Fails while `failing` is set; counts its runs.
#[derive(Default)]
struct Flaky {
    failing: AtomicBool,
    runs: AtomicUsize,
}

impl Reconciler<Set> for Arc<Flaky> {
    type Error = Failed;

    async fn reconcile(&self, _: Context<Set>) -> Result<Action, Failed> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Failed("injected"));
        }
        Ok(Action::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn the_tables_hold_a_failing_key_and_are_empty_once_it_succeeds_or_is_deleted() {
    let mut world = World::new(None);
    let flaky = Arc::new(Flaky::default());
    flaky.failing.store(true, Ordering::SeqCst);
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&flaky))
        .build()
        .expect("valid");
    let footprint = controller.footprint();
    world.spawn(controller);
    world.create_set("a", 1).await;
    world
        .until("two failed runs", |_| {
            flaky.runs.load(Ordering::SeqCst) >= 2
        })
        .await;
    let failing = footprint.sizes();
    assert_eq!(
        (failing.queued, failing.rate_limited),
        (1, 1),
        "its retry queued, its failures counted: {failing:?}"
    );
    flaky.failing.store(false, Ordering::SeqCst);
    sleep(Duration::from_secs(60)).await; // past the next retry
    assert_eq!(footprint.sizes(), TableSizes::default(), "nothing pending");
    let runs = flaky.runs.load(Ordering::SeqCst);
    world
        .sets
        .client()
        .delete(&"a".to_owned())
        .await
        .expect("deleted");
    world
        .until("the deletion's run", |_| {
            flaky.runs.load(Ordering::SeqCst) > runs
        })
        .await;
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        footprint.sizes(),
        TableSizes::default(),
        "nothing kept of a"
    );
    world.shut_down().await;
}
