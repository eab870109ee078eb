//! Queue depth per key group: only the groups named, read at scrape time.

use super::*;

/// Takes every key and holds it until the controller stops.
#[derive(Default, Clone)]
struct Hold {
    taken: Arc<Mutex<Vec<String>>>,
}

impl Reconciler<Widget> for Hold {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Self::Error> {
        self.taken.lock().push(ctx.key().clone());
        ctx.cancelled().cancelled().await;
        Ok(Action::Done)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_of_the_named_groups_is_exported_and_no_other() {
    let store = widgets(&["a-1", "a-2", "a-3", "a-4", "b-1", "c-1", "c-2"]);
    let mut manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().unwrap())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let hold = Hold::default();
    let tenant = |key: &String| key.split('-').next().unwrap_or_default().to_owned();
    let controller = manager
        .controller("widgets", &informer, hold.clone())
        .concurrency(NonZeroUsize::new(1).unwrap())
        .shutdown_grace(Duration::from_millis(50))
        .group_by(tenant)
        .group_metrics(["a", "b", "a"])
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    // One key is held; the six others wait in the queue.
    let mut metrics = Exposition::default();
    let q = |group| {
        [
            ("controller", "widgets"),
            ("name", "widgets"),
            ("group", group),
        ]
    };
    for _ in 0..200 {
        metrics = scrape(address).await;
        if metrics.value("workqueue_depth", &q("")[..2]) == Some(6.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metrics.value("workqueue_depth", &q("")[..2]), Some(6.0));
    let taken = hold.taken.lock().clone();
    assert_eq!(taken.len(), 1, "one worker: {taken:?}");
    let held = |group: &str| usize::from(taken[0].starts_with(group));
    let depth = "tend_workqueue_group_depth";
    assert_eq!(metrics.value(depth, &q("a")), Some((4 - held("a")) as f64));
    assert_eq!(metrics.value(depth, &q("b")), Some((1 - held("b")) as f64));
    let groups: Vec<_> = metrics
        .label_sets(depth)
        .into_iter()
        .map(|labels| labels["group"].clone())
        .collect();
    assert_eq!(groups, ["a", "b"], "only the groups named, once each");

    shutdown.cancel();
    within("run to return", LIMIT, run).await.unwrap().unwrap();
}
