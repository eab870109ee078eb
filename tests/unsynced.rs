//! A cache that cannot sync holds back only the controllers that read it;
//! an optional watch lets a controller start without its source.

#[path = "support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::controller::{Action, Context, Reconciler, Watch};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{Informer, Revision};

use widgets::{Widget, eventually, widgets, within};

const LIMIT: Duration = Duration::from_secs(300);

type Log = Arc<Mutex<Vec<String>>>;

/// Logs `"{tag} {key}"`, and whether the `parts` cache could be read.
#[derive(Clone)]
struct Tagged {
    tag: &'static str,
    log: Log,
}

impl Reconciler<Widget> for Tagged {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        let parts = match ctx.cache::<Part>() {
            Some(parts) => format!("parts {}", parts.len()),
            None => "no parts".to_owned(),
        };
        self.log
            .lock()
            .push(format!("{} {} ({parts})", self.tag, ctx.key()));
        Ok(Action::Done)
    }
}

/// A secondary object type: a part of a widget.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    name: String,
    widget: String,
    version: Revision,
}

tend::impl_object!(Part, key: name: String, version: version);

/// Registers a `sets` controller over `sets` that owns the parts of
/// `parts` through an optional watch, at its default placement.
fn with_optional_parts(
    manager: &mut Manager,
    sets: &MemoryStore<Widget>,
    parts: &MemoryStore<Part>,
    log: &Log,
) {
    let primary = manager
        .informer("widgets", || Informer::builder(sets.clone()).build())
        .expect("registered");
    let secondary = manager
        .informer("parts", || Informer::builder(parts.clone()).build())
        .expect("registered");
    let tagged = Tagged {
        tag: "sets",
        log: Arc::clone(log),
    };
    let controller = manager
        .controller("sets", &primary, tagged)
        .owns(Watch::new(secondary).optional(), |part: &Part| {
            Some(part.widget.clone())
        })
        .build()
        .expect("valid");
    manager.add_controller(controller).expect("registered");
}

fn count(log: &Log, prefix: &str) -> usize {
    log.lock().iter().filter(|e| e.starts_with(prefix)).count()
}

#[tokio::test(start_paused = true)]
async fn one_of_three_controllers_whose_source_never_lists_does_not_hold_back_the_others() {
    let healthy = widgets(&["a", "b"]);
    let broken = MemoryStore::<Widget>::new("broken");
    futures::executor::block_on(broken.client().create(Widget {
        name: "c".to_owned(),
        version: Revision::ZERO,
    }))
    .expect("created");
    broken.fail_next_lists(u32::MAX);
    let log = Log::default();
    let mut manager = Manager::builder()
        .without_signals()
        .sync_timeout(Duration::from_secs(10))
        .build()
        .expect("valid");
    let good = manager
        .informer("healthy", || Informer::builder(healthy.clone()).build())
        .expect("registered");
    let bad = manager
        .informer("broken", || Informer::builder(broken.clone()).build())
        .expect("registered");
    for (tag, informer) in [("one", &good), ("two", &good), ("three", &bad)] {
        let tagged = Tagged {
            tag,
            log: Arc::clone(&log),
        };
        let controller = manager
            .controller(tag, informer, tagged)
            .build()
            .expect("valid");
        manager.add_controller(controller).expect("registered");
    }
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the two healthy controllers to reconcile", LIMIT, || {
        count(&log, "one ") == 2 && count(&log, "two ") == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(count(&log, "three "), 0, "its cache never synced");
    assert!(!run.is_finished(), "the manager waits: {log:?}");

    broken.fail_next_lists(0);
    eventually(
        "the third controller to start once its source lists",
        LIMIT,
        || count(&log, "three ") == 1,
    )
    .await;
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
}

#[tokio::test(start_paused = true)]
async fn an_optional_watch_lets_a_controller_start_and_use_the_source_once_it_answers() {
    let sets = widgets(&["a"]);
    let parts = MemoryStore::<Part>::new("parts");
    parts.fail_next_lists(u32::MAX);
    let log = Log::default();
    let mut manager = Manager::builder().without_signals().build().expect("valid");
    with_optional_parts(&mut manager, &sets, &parts, &log);
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("a reconcile without the optional source", LIMIT, || {
        log.lock().iter().any(|e| e == "sets a (no parts)")
    })
    .await;

    parts.fail_next_lists(0);
    parts
        .client()
        .create(Part {
            name: "wheel".to_owned(),
            widget: "a".to_owned(),
            version: Revision::ZERO,
        })
        .await
        .expect("created");
    eventually(
        "the part to reconcile its owner, with the cache",
        LIMIT,
        || log.lock().iter().any(|e| e == "sets a (parts 1)"),
    )
    .await;
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
}

#[tokio::test(start_paused = true)]
async fn an_optional_source_that_never_lists_neither_fails_run_nor_holds_back_the_election() {
    let sets = widgets(&["a"]);
    let parts = MemoryStore::<Part>::new("parts");
    parts.fail_next_lists(u32::MAX);
    let log = Log::default();
    let election = tend::memory::MemoryElectionGroup::new("lock");
    let mut manager = Manager::builder()
        .without_signals()
        .leader_election(election.candidate())
        .sync_timeout(Duration::from_secs(100))
        .unsynced_caches(tend::manager::UnsyncedCaches::Fail)
        .build()
        .expect("valid");
    with_optional_parts(&mut manager, &sets, &parts, &log);
    let shutdown = manager.shutdown_token();
    let started = tokio::time::Instant::now();
    let run = tokio::spawn(manager.run());
    eventually("the leader's reconcile", LIMIT, || {
        log.lock().iter().any(|e| e == "sets a (no parts)")
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "the election waited for the optional source: {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert!(!run.is_finished(), "an optional source does not fail run");
    shutdown.cancel();
    within("run", LIMIT, run)
        .await
        .expect("not panicked")
        .expect("clean");
}
