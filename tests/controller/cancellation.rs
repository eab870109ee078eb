//! Cancelling a context token, and shutting down mid-run.

use super::*;

/// Cancels its own context token, then finishes normally.
struct SelfCancel(Arc<AtomicUsize>);

impl Reconciler<Set> for SelfCancel {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        ctx.cancelled().cancel();
        sleep(Duration::from_millis(10)).await;
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Action::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_context_token_does_not_abort_the_reconcile() {
    let mut world = World::new(None);
    let finished = Arc::new(AtomicUsize::new(0));
    world.spawn(
        Controller::builder(
            "sets",
            &world.set_informer,
            SelfCancel(Arc::clone(&finished)),
        )
        .build()
        .expect("valid"),
    );
    world.create_set("a", 1).await;
    world.create_set("b", 1).await;
    world
        .until("both reconciles finished", |_| {
            finished.load(Ordering::SeqCst) == 2
        })
        .await;
    world.shut_down().await;
}

/// Counts reconciles; shuts the queue down during the third.
struct ShutsDownAtThird {
    calls: AtomicUsize,
    queue: Mutex<Option<tend::WorkQueue<String, tend::controller::Triggers>>>,
}

impl Reconciler<Set> for Arc<ShutsDownAtThird> {
    type Error = Failed;

    async fn reconcile(&self, _ctx: Context<Set>) -> Result<Action, Failed> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
            let queue = self.queue.lock().expect("not poisoned").clone();
            queue.expect("set before the run").shutdown();
        }
        Ok(Action::Done)
    }
}

/// A worker takes quick keys from a backlog several at a time; once the queue
/// is shut down it starts none of the keys it still holds.
#[tokio::test(start_paused = true)]
async fn no_reconcile_starts_after_shutdown_even_from_a_run_of_keys() {
    let world = World::new(None);
    world.create_sets("s", 100).await;
    let reconciler = Arc::new(ShutsDownAtThird {
        calls: AtomicUsize::new(0),
        queue: Mutex::new(None),
    });
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&reconciler))
        .concurrency(NonZeroUsize::new(1).expect("non-zero"))
        .build()
        .expect("valid");
    *reconciler.queue.lock().expect("not poisoned") = Some(controller.queue());
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    world
        .until("the queue was shut down", |_| {
            reconciler.calls.load(Ordering::SeqCst) >= 3
        })
        .await;
    // Let the worker go on if it would.
    sleep(Duration::from_secs(1)).await;
    assert_eq!(reconciler.calls.load(Ordering::SeqCst), 3);
    stop_controller(&stop, run).await;
    world.shut_down().await;
}
