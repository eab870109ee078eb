//! Reconcile timeouts and the shutdown grace period.

use super::*;

/// Sleeps for ever, recording its cancellation and drop.
struct Hang {
    started: AtomicUsize,
    cancelled: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
}

struct DropFlag(Arc<AtomicUsize>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Reconciler<Set> for Arc<Hang> {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _flag = DropFlag(Arc::clone(&self.dropped));
        let token = ctx.cancelled();
        let cancelled = Arc::clone(&self.cancelled);
        tokio::spawn(async move {
            token.cancelled().await;
            cancelled.store(true, Ordering::SeqCst);
        });
        std::future::pending().await
    }
}

fn hang() -> Arc<Hang> {
    Arc::new(Hang {
        started: AtomicUsize::new(0),
        cancelled: Arc::new(AtomicBool::new(false)),
        dropped: Arc::new(AtomicUsize::new(0)),
    })
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_past_its_timeout_is_cancelled_and_retried() {
    let mut world = World::new(None);
    let hang = hang();
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&hang))
            .reconcile_timeout(Duration::from_secs(1))
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world
        .until("a retry after the timeout", |_| {
            hang.started.load(Ordering::SeqCst) >= 2
        })
        .await;
    assert!(hang.cancelled.load(Ordering::SeqCst));
    assert!(hang.dropped.load(Ordering::SeqCst) >= 1);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_reconcile_does_not_block_other_keys() {
    let mut world = World::new(None);
    let hang = hang();
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&hang))
            .build()
            .expect("valid"),
    );
    for name in ["a", "b", "c"] {
        world.create_set(name, 1).await;
    }
    world
        .until("three reconciles at once", |_| {
            hang.started.load(Ordering::SeqCst) == 3
        })
        .await;
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_the_grace_period_then_cancels_and_leaves_no_task() {
    let world = World::new(None);
    let hang = hang();
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&hang))
        .shutdown_grace(Duration::from_secs(5))
        .build()
        .expect("valid");
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    world.create_set("a", 1).await;
    world
        .until("the reconcile started", |_| {
            hang.started.load(Ordering::SeqCst) == 1
        })
        .await;
    let start = Instant::now();
    stop_controller(&stop, run).await;
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(
        hang.dropped.load(Ordering::SeqCst),
        1,
        "the reconcile was dropped"
    );
    world.shut_down().await;
}
