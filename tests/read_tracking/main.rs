//! Dependencies tracked from reads (`ControllerBuilder::reads`): what a
//! reconcile reads of a tracked source wakes it when it changes, and only
//! while its last reconcile read it; and the service example's relation by
//! tracked reads against the mapper (`service.rs`). Paused clock; the
//! harness settles.

mod service;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, Reconciler, Trigger, Triggers};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Filter, Informer, Payload, Revision};

const LIMIT: Duration = Duration::from_secs(60);

/// The primary: a reader, reconciled with what its plan says to read.
#[derive(Debug, Clone)]
struct Reader {
    name: String,
    version: Revision,
}

/// The tracked source.
#[derive(Debug, Clone)]
struct Pod {
    name: String,
    app: String,
    ready: bool,
    version: Revision,
}

tend::impl_object!(Reader, key: name: String, version: version);
tend::impl_object!(Pod, key: name: String, version: version);

/// What one reader's reconciles read of the pods.
#[derive(Debug, Clone, Default)]
struct Plan {
    keys: Vec<&'static str>,
    /// `by_index("app", …)`.
    apps: Vec<&'static str>,
    /// `keys_by_index("app", …)`.
    app_keys: Vec<&'static str>,
    /// `list_where(ready)`.
    ready: bool,
}

/// Reads as planned and writes down each run's triggers.
struct Planned {
    plans: Mutex<HashMap<String, Plan>>,
    runs: Mutex<Vec<(String, Triggers)>>,
    /// Each run's `read_causes`, as they display.
    causes: Mutex<Vec<Vec<String>>>,
    ready: Filter<Pod>,
}

impl Reconciler<Reader> for Arc<Planned> {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Reader>) -> Result<Action, Infallible> {
        let plan = self.plans.lock().unwrap().get(ctx.key()).cloned();
        self.runs
            .lock()
            .unwrap()
            .push((ctx.key().clone(), ctx.triggers()));
        let causes = ctx.read_causes().iter().map(ToString::to_string);
        self.causes.lock().unwrap().push(causes.collect());
        let (Some(plan), Some(pods)) = (plan, ctx.cache::<Pod>()) else {
            return Ok(Action::Done);
        };
        for key in plan.keys {
            let _ = pods.get(&key.to_owned());
        }
        for app in plan.apps {
            let _ = pods.by_index("app", app).expect("an app index");
        }
        for app in plan.app_keys {
            let _ = pods.keys_by_index("app", app).expect("an app index");
        }
        if plan.ready {
            let _ = pods.list_where(&self.ready);
        }
        Ok(Action::Done)
    }
}

struct World {
    readers: MemoryStore<Reader>,
    pods: MemoryStore<Pod>,
    planned: Arc<Planned>,
    harness: Harness,
    footprint: tend::controller::Footprint<String>,
}

impl World {
    /// Readers with these plans, and a controller that `reads` the pods
    /// (and owns them by app, with `owns_by_app`).
    async fn new(plans: &[(&str, Plan)], owns_by_app: bool) -> Self {
        let readers = MemoryStore::new("readers");
        let pods = MemoryStore::new("pods");
        let planned = Arc::new(Planned {
            plans: Mutex::new(
                plans
                    .iter()
                    .map(|(name, plan)| ((*name).to_owned(), plan.clone()))
                    .collect(),
            ),
            runs: Mutex::default(),
            causes: Mutex::default(),
            ready: Filter::new("ready", |pod: &Pod| pod.ready),
        });
        for (name, _) in plans {
            readers.put(Reader {
                name: (*name).to_owned(),
                version: Revision::ZERO,
            });
        }
        let reader_informer = Informer::builder(readers.clone()).build().unwrap();
        let pod_informer = Informer::builder(pods.clone())
            .index("app", |pod: &Pod| vec![pod.app.clone()])
            .build()
            .unwrap();
        let mut builder = Controller::builder("readers", &reader_informer, Arc::clone(&planned));
        if owns_by_app {
            // Before `reads`: the owned informer's cache is the one read.
            builder = builder.owns(&pod_informer, |pod: &Pod| Some(pod.app.clone()));
        }
        let builder = builder.reads(&pod_informer);
        let mut harness = Harness::new();
        harness.informer(&reader_informer);
        harness.informer(&pod_informer);
        let controller = builder.build().unwrap();
        let footprint = controller.footprint();
        harness.controller(controller);
        let mut world = Self {
            readers,
            pods,
            planned,
            harness,
            footprint,
        };
        world.settle().await;
        world
    }

    async fn settle(&mut self) {
        self.harness.settle(LIMIT).await.expect("settles");
    }

    /// The runs since the last call, as (key, triggers).
    fn runs(&self) -> Vec<(String, Triggers)> {
        self.causes();
        std::mem::take(&mut *self.planned.runs.lock().unwrap())
    }

    /// The read causes of each run since the last call (or `runs`).
    fn causes(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut *self.planned.causes.lock().unwrap())
    }

    fn plan(&self, reader: &str, plan: Plan) {
        let mut plans = self.planned.plans.lock().unwrap();
        plans.insert(reader.to_owned(), plan);
    }

    /// Puts the pod and returns the runs it caused.
    async fn put(&mut self, name: &str, app: &str, ready: bool) -> Vec<(String, Triggers)> {
        self.pods.put(Pod {
            name: name.to_owned(),
            app: app.to_owned(),
            ready,
            version: Revision::ZERO,
        });
        self.settle().await;
        self.runs()
    }

    /// Changes the reader (a reconcile with `Changed`).
    async fn touch(&mut self, reader: &str) {
        self.readers.put(Reader {
            name: reader.to_owned(),
            version: Revision::ZERO,
        });
        self.settle().await;
    }
}

fn read(key: &str) -> (String, Triggers) {
    (key.to_owned(), Trigger::Read.into())
}

#[tokio::test(start_paused = true)]
async fn a_pod_read_by_key_wakes_its_reader_from_its_creation_on_and_no_one_else() {
    let by_key = Plan {
        keys: vec!["p1"],
        ..Plan::default()
    };
    let mut world = World::new(&[("a", by_key), ("b", Plan::default())], false).await;
    assert_eq!(world.runs().len(), 2, "each reader ran once");
    assert_eq!(
        world.put("p1", "web", true).await,
        [read("a")],
        "a read it missing"
    );
    assert_eq!(
        world.put("p1", "web", false).await,
        [read("a")],
        "and now present"
    );
    assert_eq!(world.put("p2", "web", false).await, [], "nobody read p2");
    world.pods.client().delete(&"p1".to_owned()).await.unwrap();
    world.settle().await;
    assert_eq!(world.runs(), [read("a")], "its deletion too");
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_woken_by_a_read_is_told_which_dependency_changed() {
    let plan = Plan {
        keys: vec!["p1"],
        apps: vec!["web"],
        ready: true,
        ..Plan::default()
    };
    let mut world = World::new(&[("a", plan)], false).await;
    assert_eq!(
        world.causes(),
        [Vec::<String>::new()],
        "a first run: no read woke it"
    );
    world.runs();
    world.pods.put(Pod {
        name: "p2".to_owned(),
        app: "web".to_owned(),
        ready: false,
        version: Revision::ZERO,
    });
    world.settle().await;
    assert_eq!(world.causes(), [[r#""p2" in pods (index app=web)"#]]);
    world.pods.put(Pod {
        name: "p1".to_owned(),
        app: "db".to_owned(),
        ready: true,
        version: Revision::ZERO,
    });
    world.settle().await;
    assert_eq!(world.causes(), [[r#""p1" in pods (its key)"#]]);
    world.touch("a").await;
    assert_eq!(
        world.causes(),
        [Vec::<String>::new()],
        "woken by its own change"
    );
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dependency_dropped_from_a_reconciles_reads_stops_waking_it() {
    let p1 = Plan {
        keys: vec!["p1"],
        ..Plan::default()
    };
    let mut world = World::new(&[("a", p1)], false).await;
    world.runs();
    let p2 = Plan {
        keys: vec!["p2"],
        ..Plan::default()
    };
    world.plan("a", p2);
    world.touch("a").await;
    assert_eq!(world.runs(), [("a".to_owned(), Trigger::Changed.into())]);
    assert_eq!(
        world.put("p1", "web", true).await,
        [],
        "p1 is no longer read"
    );
    assert_eq!(world.put("p2", "web", true).await, [read("a")], "p2 is");
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_new_object_matching_a_recorded_filter_wakes_the_reader() {
    let ready = Plan {
        ready: true,
        ..Plan::default()
    };
    let mut world = World::new(&[("a", ready)], false).await;
    world.runs();
    assert_eq!(
        world.put("p1", "web", false).await,
        [],
        "not ready: not listed"
    );
    assert_eq!(
        world.put("p2", "web", true).await,
        [read("a")],
        "a new ready pod"
    );
    assert_eq!(
        world.put("p1", "web", true).await,
        [read("a")],
        "one turning ready"
    );
    assert_eq!(
        world.put("p2", "web", false).await,
        [read("a")],
        "one leaving"
    );
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn pods_entering_or_leaving_a_read_index_value_wake_its_readers() {
    let objects = Plan {
        apps: vec!["web"],
        ..Plan::default()
    };
    let keys = Plan {
        app_keys: vec!["web"],
        ..Plan::default()
    };
    let mut world = World::new(&[("objects", objects), ("keys", keys)], false).await;
    world.runs();
    let mut entered = world.put("p1", "web", false).await;
    entered.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(entered, [read("keys"), read("objects")], "entered web");
    let changed = world.put("p1", "web", true).await;
    assert_eq!(
        changed,
        [read("objects")],
        "changed in web: the keys did not"
    );
    let mut left = world.put("p1", "db", true).await;
    left.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(left, [read("keys"), read("objects")], "left web");
    assert_eq!(
        world.put("p1", "db", false).await,
        [],
        "changed outside web"
    );
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_deleted_reader_is_woken_no_more_by_what_it_read() {
    let p1 = Plan {
        keys: vec!["p1"],
        ..Plan::default()
    };
    let mut world = World::new(&[("a", p1)], false).await;
    world.runs();
    assert_eq!(world.footprint.sizes().tracked_reads, 1, "a's read of p1");
    world
        .readers
        .client()
        .delete(&"a".to_owned())
        .await
        .unwrap();
    world.settle().await;
    assert_eq!(world.runs(), [("a".to_owned(), Trigger::Deleted.into())]);
    assert_eq!(
        world.put("p1", "web", true).await,
        [],
        "its reads were forgotten"
    );
    assert_eq!(
        world.footprint.sizes().tracked_reads,
        0,
        "and left the footprint"
    );
    world.harness.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reads_compose_with_owns_and_a_key_woken_by_both_gets_both_triggers() {
    let p1 = Plan {
        keys: vec!["p1"],
        ..Plan::default()
    };
    let mut world = World::new(&[("a", p1), ("web", Plan::default())], true).await;
    world.runs();
    let mut both = Triggers::from(Trigger::Owned);
    both.merge(Trigger::Read.into());
    let runs = world.put("p1", "a", true).await;
    assert_eq!(runs, [("a".to_owned(), both)], "owned by a, and read by it");
    let runs = world.put("p2", "web", true).await;
    assert_eq!(
        runs,
        [("web".to_owned(), Trigger::Owned.into())],
        "only owned"
    );
    world.harness.shutdown().await.unwrap();
}
