//! Key groups: a tenant with a backlog does not starve a quiet one.

use super::*;

/// Records the order keys are reconciled in; each reconcile takes a second.
#[derive(Default, Clone)]
struct Order(Arc<Mutex<Vec<String>>>);

impl Reconciler<Set> for Order {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Self::Error> {
        self.0.lock().expect("not poisoned").push(ctx.key().clone());
        sleep(Duration::from_secs(1)).await;
        Ok(Action::Done)
    }
}

/// Creates 300 `noisy-*` sets then 3 `quiet-*` ones, one worker taking them,
/// after a first set holding the one worker, and returns where the quiet
/// ones were reconciled in the order.
async fn quiet_positions(grouped: bool) -> Vec<usize> {
    let mut world = World::new(None);
    let order = Order::default();
    let mut builder = Controller::builder("sets", &world.set_informer, order.clone())
        .concurrency(NonZeroUsize::new(1).expect("one"));
    if grouped {
        builder = builder.group_by(|key: &String| key.split('-').next().map(str::to_owned));
    }
    world.spawn(builder.build().expect("valid"));
    // Reconciled as a change, so the cache has synced: what follows arrives
    // as changes too, in order, while this reconcile holds the worker.
    world.create_set("start", 0).await;
    let started = |_: &World| !order.0.lock().expect("not poisoned").is_empty();
    world.until("the first set is reconciled", started).await;
    world.create_sets("noisy-", 300).await;
    world.create_sets("quiet-", 3).await;
    let reconciled = |_: &World| order.0.lock().expect("not poisoned").len() == 304;
    world.until("every set is reconciled", reconciled).await;
    let order = order.0.lock().expect("not poisoned").clone();
    world.shut_down().await;
    let quiet = order
        .iter()
        .enumerate()
        .filter(|(_, k)| k.starts_with("quiet"));
    quiet.map(|(at, _)| at).collect()
}

#[tokio::test(start_paused = true)]
async fn a_quiet_groups_keys_take_turns_with_a_noisy_groups_backlog() {
    let positions = quiet_positions(true).await;
    // The groups alternate, the noisy one first (its keys came first).
    assert_eq!(positions, [2, 4, 6], "of 304");
}

#[tokio::test(start_paused = true)]
async fn without_groups_a_quiet_key_waits_for_the_whole_backlog() {
    let positions = quiet_positions(false).await;
    assert_eq!(positions, [301, 302, 303]);
}
