//! Public behaviour of `Controller` on the memory backend, with paused time.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::controller::{
    Action, Context, Controller, ControllerError, ErrorPolicy, Predicate, Reconciler, Trigger,
    Watch,
};
use tend::memory::{Faults, MemoryStore};
use tend::{Event, Informer, InformerError, Object, Revision};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
struct Set {
    name: String,
    replicas: usize,
    version: Revision,
    generation: u64,
}

#[derive(Debug, Clone)]
struct Member {
    name: String,
    owner: String,
    version: Revision,
}

impl Object for Set {
    type Key = String;
    fn key(&self) -> String {
        self.name.clone()
    }
    fn version(&self) -> Revision {
        self.version
    }
    fn set_version(&mut self, version: Revision) {
        self.version = version;
    }
    fn generation(&self) -> Option<u64> {
        Some(self.generation)
    }
    fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }
    fn spec_changed(&self, old: &Self) -> bool {
        self.replicas != old.replicas
    }
}

tend::impl_object!(Member, key: name: String, version: version);

fn set(name: &str, replicas: usize) -> Set {
    Set {
        name: name.into(),
        replicas,
        version: Revision::ZERO,
        generation: 0,
    }
}

/// A world of sets and members with running informers.
struct World {
    sets: MemoryStore<Set>,
    members: MemoryStore<Member>,
    set_informer: Informer<Set>,
    member_informer: Informer<Member>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl World {
    fn new(relist: Option<Duration>) -> Self {
        let sets = MemoryStore::new("sets");
        let members = MemoryStore::new("members");
        let mut set_informer = Informer::builder(sets.clone());
        let mut member_informer =
            Informer::builder(members.clone()).index("owner", |m: &Member| vec![m.owner.clone()]);
        if let Some(period) = relist {
            set_informer = set_informer.relist_every(period);
            member_informer = member_informer.relist_every(period);
        }
        let (set_informer, member_informer) = (
            set_informer.build().expect("valid"),
            member_informer.build().expect("valid"),
        );
        let stop = CancellationToken::new();
        let tasks = vec![
            tokio::spawn({
                let (i, s) = (set_informer.clone(), stop.clone());
                async move { i.run(s).await.expect("informer runs once") }
            }),
            tokio::spawn({
                let (i, s) = (member_informer.clone(), stop.clone());
                async move { i.run(s).await.expect("informer runs once") }
            }),
        ];
        Self {
            sets,
            members,
            set_informer,
            member_informer,
            stop,
            tasks,
        }
    }

    fn spawn<R: Reconciler<Set>>(&mut self, controller: Controller<Set, R>) {
        let stop = self.stop.clone();
        self.tasks.push(tokio::spawn(async move {
            controller.run(stop).await.expect("controller runs");
        }));
    }

    /// Creates sets `{prefix}0` … `{prefix}{count - 1}`, with no members.
    async fn create_sets(&self, prefix: &str, count: usize) {
        for n in 0..count {
            self.sets
                .client()
                .create(set(&format!("{prefix}{n}"), 0))
                .await
                .expect("created");
        }
    }

    fn members_of(&self, owner: &str) -> usize {
        let snapshot = self.members.snapshot();
        snapshot.objects.iter().filter(|m| m.owner == owner).count()
    }

    /// Waits (bounded) until `done` holds.
    async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        timeout(LIMIT, async {
            while !done(self) {
                sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
    }

    async fn shut_down(self) {
        self.stop.cancel();
        for task in self.tasks {
            timeout(LIMIT, task)
                .await
                .expect("a task did not stop")
                .expect("a task failed");
        }
    }
}

/// Cancels `stop` and waits (bounded) until the controller's `run` returned
/// cleanly.
async fn stop_controller(stop: &CancellationToken, run: JoinHandle<Result<(), ControllerError>>) {
    stop.cancel();
    timeout(LIMIT, run)
        .await
        .expect("run did not return")
        .expect("task")
        .expect("clean shutdown");
}

/// Keeps each set's member count equal to its replicas.
struct Sets {
    members: MemoryStore<Member>,
    next: AtomicUsize,
    expected: Mutex<HashMap<String, HashSet<String>>>,
}

impl Sets {
    fn new(members: &MemoryStore<Member>) -> Self {
        Self {
            members: members.clone(),
            next: AtomicUsize::new(0),
            expected: Mutex::default(),
        }
    }

    /// Puts a set's expected creations back after its reconcile.
    fn keep(&self, set: &str, created: HashSet<String>) {
        let mut expected = self.expected.lock().expect("not poisoned");
        expected.insert(set.to_owned(), created);
    }
}

#[derive(Debug)]
struct Failed(&'static str);

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Failed {}

impl Reconciler<Set> for Sets {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        let cache = ctx.cache::<Member>().ok_or(Failed("no member cache"))?;
        let owned = cache
            .by_index("owner", ctx.key())
            .map_err(|_| Failed("no index"))?;
        let desired = ctx.object().map_or(0, |s| s.replicas);
        // Taken out while reconciling (no lock across the writes' awaits):
        // a key is never reconciled by two workers at once.
        let taken = self
            .expected
            .lock()
            .expect("not poisoned")
            .remove(ctx.key());
        let mut created = taken.unwrap_or_default();
        created.retain(|name| !owned.iter().any(|m| &m.name == name));
        let actual = owned.len() + created.len();
        for _ in actual..desired {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let member = Member {
                name: format!("{}-{n}", ctx.key()),
                owner: ctx.key().clone(),
                version: Revision::ZERO,
            };
            let member = self.members.client().create(member).await;
            let Ok(member) = member else {
                self.keep(ctx.key(), created);
                return Err(Failed("create"));
            };
            created.insert(member.name);
        }
        self.keep(ctx.key(), created);
        for member in owned.iter().take(actual.saturating_sub(desired)) {
            // Already gone is fine: level-triggered, the cache will catch up.
            let _ = self.members.client().delete(&member.name).await;
        }
        Ok(Action::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn converges_after_create_scale_and_delete_and_recreates_deleted_members() {
    let mut world = World::new(None);
    let controller = Controller::builder("sets", &world.set_informer, Sets::new(&world.members))
        .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
        .build()
        .expect("valid");
    world.spawn(controller);
    world
        .sets
        .client()
        .create(set("web", 4))
        .await
        .expect("created");
    world.until("4 members", |w| w.members_of("web") == 4).await;

    let victim = world.members.snapshot().objects[0].name.clone();
    world
        .members
        .client()
        .delete(&victim)
        .await
        .expect("deleted");
    world
        .until("a replacement", |w| w.members_of("web") == 4)
        .await;
    assert!(world.members.get(&victim).is_none());

    let mut web = world.sets.get(&"web".into()).expect("exists");
    web.replicas = 2;
    world.sets.client().update(web).await.expect("updated");
    world
        .until("scaled to 2", |w| w.members_of("web") == 2)
        .await;

    world
        .sets
        .client()
        .delete(&"web".into())
        .await
        .expect("deleted");
    world
        .until("cleaned up", |w| w.members_of("web") == 0)
        .await;
    world.shut_down().await;
}

/// One recorded reconcile: key, triggers, attempt, start.
type Run = (String, Vec<Trigger>, u32, Instant);

/// Records every reconcile: its triggers, attempt, and overlap per key.
#[derive(Default)]
struct Probe {
    runs: Mutex<Vec<Run>>,
    running: Mutex<HashSet<String>>,
    overlaps: AtomicUsize,
    fail_first: usize,
    terminal: bool,
    work: Duration,
    requeue: Option<Duration>,
    calls: AtomicUsize,
    /// The replicas each key's latest run read (`None`: no object).
    last_seen: Mutex<HashMap<String, Option<usize>>>,
}

impl Probe {
    fn runs_of(&self, key: &str) -> Vec<(Vec<Trigger>, u32, Instant)> {
        let runs = self.runs.lock().expect("not poisoned");
        runs.iter()
            .filter(|r| r.0 == key)
            .map(|r| (r.1.clone(), r.2, r.3))
            .collect()
    }
}

impl Reconciler<Set> for Arc<Probe> {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, Failed> {
        let key = ctx.key().clone();
        if !self
            .running
            .lock()
            .expect("not poisoned")
            .insert(key.clone())
        {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.runs.lock().expect("not poisoned").push((
            key.clone(),
            ctx.triggers().iter().collect(),
            ctx.attempt(),
            Instant::now(),
        ));
        self.last_seen
            .lock()
            .expect("not poisoned")
            .insert(key.clone(), ctx.object().map(|s| s.replicas));
        sleep(self.work).await;
        self.running.lock().expect("not poisoned").remove(&key);
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(Failed("injected"));
        }
        Ok(self.requeue.map_or(Action::Done, Action::RequeueAfter))
    }

    fn error_policy(&self, _: &Failed) -> ErrorPolicy {
        if self.terminal {
            ErrorPolicy::Terminal
        } else {
            ErrorPolicy::Retry
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_is_never_reconciled_by_two_workers_at_once() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        work: Duration::from_millis(30),
        ..Probe::default()
    });
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .concurrency(NonZeroUsize::new(8).expect("non-zero"))
        .build()
        .expect("valid");
    world.spawn(controller);
    for name in ["a", "b", "c"] {
        world
            .sets
            .client()
            .create(set(name, 1))
            .await
            .expect("created");
    }
    let mut last_update = Instant::now();
    for round in 0..200 {
        for name in ["a", "b", "c"] {
            let mut s = world.sets.get(&name.into()).expect("exists");
            s.replicas = round;
            world.sets.client().update(s).await.expect("updated");
        }
        last_update = Instant::now();
        sleep(Duration::from_millis(7)).await;
    }
    sleep(Duration::from_secs(1)).await;
    assert_eq!(probe.overlaps.load(Ordering::SeqCst), 0);
    // Updates during a reconcile were coalesced, never lost: each key's last
    // run started after its last update, and read it.
    let seen = probe.last_seen.lock().expect("not poisoned").clone();
    for name in ["a", "b", "c"] {
        let runs = probe.runs_of(name);
        assert!(
            runs.len() >= 10 && runs.len() < 200,
            "{name}: {} runs",
            runs.len()
        );
        let (_, _, started) = runs.last().expect("runs");
        assert!(
            *started >= last_update,
            "{name}: last run started {:?} before the last update",
            last_update - *started
        );
        assert_eq!(seen[name], Some(199), "{name}: the last run's object");
    }
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn errors_are_retried_on_the_exponential_schedule_and_reset_by_success() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        fail_first: 4,
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .until("5 runs", |_| probe.runs_of("a").len() == 5)
        .await;
    let runs = probe.runs_of("a");
    let gaps: Vec<_> = runs.windows(2).map(|w| w[1].2 - w[0].2).collect();
    let ms = Duration::from_millis;
    assert_eq!(gaps, [ms(5), ms(10), ms(20), ms(40)]);
    let attempts: Vec<_> = runs.iter().map(|r| r.1).collect();
    assert_eq!(attempts, [1, 2, 3, 4, 5]);
    assert!(runs[1].0.contains(&Trigger::Retry));
    // Success forgot the failures: the next change starts at attempt 1.
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("6 runs", |_| probe.runs_of("a").len() == 6)
        .await;
    assert_eq!(probe.runs_of("a")[5].1, 1);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_not_retried() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        fail_first: usize::MAX,
        terminal: true,
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .until("one run", |_| probe.runs_of("a").len() == 1)
        .await;
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(probe.runs_of("a").len(), 1);
    world.shut_down().await;
}

/// Counts reconciles that ended in a panic (in the reconcile or in handling
/// its outcome).
#[derive(Default)]
struct Panics(AtomicUsize);

impl tend::controller::ControllerObserver for Panics {
    fn reconcile_finished(&self, outcome: tend::controller::Outcome, _took: Duration) {
        if outcome == tend::controller::Outcome::Panic {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_requeue_or_retry_after_duration_max_waits_until_the_next_change() {
    let mut world = World::new(None);
    let requeues = Arc::new(Probe {
        requeue: Some(Duration::MAX),
        ..Probe::default()
    });
    let retries = Arc::new(Probe {
        fail_first: usize::MAX,
        ..Probe::default()
    });
    let no_cap = tend::rate_limit::ExponentialBackoff::new(Duration::MAX, Duration::MAX)
        .and_then(|backoff| backoff.jitter(1.0))
        .expect("valid");
    let panics = Arc::new(Panics::default());
    world.spawn(
        Controller::builder("requeues", &world.set_informer, Arc::clone(&requeues))
            .observer(panics.clone())
            .build()
            .expect("valid"),
    );
    world.spawn(
        Controller::builder("retries", &world.set_informer, Arc::clone(&retries))
            .rate_limiter(no_cap)
            .observer(panics.clone())
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    let runs = |probe: &Arc<Probe>, n: usize| {
        let probe = Arc::clone(probe);
        move |_: &World| probe.runs_of("a").len() >= n
    };
    world.until("the first runs", runs(&requeues, 1)).await;
    world.until("the first runs", runs(&retries, 1)).await;
    sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(requeues.runs_of("a").len(), 1, "no requeue within a day");
    assert_eq!(retries.runs_of("a").len(), 1, "no retry within a day");

    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("a change runs it again", runs(&requeues, 2))
        .await;
    world
        .until("a change runs it again", runs(&retries, 2))
        .await;
    assert_eq!(panics.0.load(Ordering::SeqCst), 0, "no arithmetic panicked");
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn triggers_say_why_each_reconcile_ran() {
    let mut world = World::new(None);
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    let probe = Arc::new(Probe {
        requeue: Some(Duration::from_secs(60)),
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .watches(&world.member_informer, |m: &Member| {
                vec![format!("watched-by-{}", m.name)]
            })
            .resync(Duration::from_secs(1000))
            .build()
            .expect("valid"),
    );
    let first = |key: &str, n: usize| {
        let probe = Arc::clone(&probe);
        let key = key.to_owned();
        move |_: &World| probe.runs_of(&key).len() >= n
    };
    world.until("initial", first("a", 1)).await;
    assert_eq!(probe.runs_of("a")[0].0, [Trigger::Initial]);

    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 5;
    world.sets.client().update(a).await.expect("updated");
    world.until("changed", first("a", 2)).await;
    assert_eq!(probe.runs_of("a")[1].0, [Trigger::Changed]);

    let m = Member {
        name: "m".into(),
        owner: "a".into(),
        version: Revision::ZERO,
    };
    world.members.client().create(m).await.expect("created");
    world.until("owned", first("a", 3)).await;
    assert_eq!(probe.runs_of("a")[2].0, [Trigger::Owned]);
    world.until("mapped", first("watched-by-m", 1)).await;
    assert_eq!(probe.runs_of("watched-by-m")[0].0, [Trigger::Mapped]);

    world.until("requeue", first("a", 4)).await;
    assert_eq!(probe.runs_of("a")[3].0, [Trigger::Requeue]);

    world
        .sets
        .client()
        .delete(&"a".into())
        .await
        .expect("deleted");
    world.until("deleted", first("a", 5)).await;
    assert_eq!(probe.runs_of("a")[4].0, [Trigger::Deleted]);

    world
        .sets
        .client()
        .create(set("b", 1))
        .await
        .expect("created");
    world.until("b", first("b", 1)).await;
    sleep(Duration::from_secs(1200)).await;
    assert!(
        probe
            .runs_of("b")
            .iter()
            .any(|r| r.0.contains(&Trigger::Resync)),
        "a controller resync within 1000 s ± 10 %"
    );
    world.shut_down().await;
}

/// A change that comes before a failed key's retry timer runs the key at
/// once; that run is a retry too (attempt 2), and says so.
#[tokio::test(start_paused = true)]
async fn a_change_before_the_retry_timer_still_reports_the_retry() {
    let mut world = World::new(None);
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    let probe = Arc::new(Probe {
        fail_first: 1,
        ..Probe::default()
    });
    let hour = Duration::from_secs(3600);
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .rate_limiter(tend::rate_limit::ExponentialBackoff::new(hour, hour).expect("valid"))
            .build()
            .expect("valid"),
    );
    world
        .until("the first run failed", |_| {
            probe.calls.load(Ordering::SeqCst) >= 1
        })
        .await;
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("the change ran the key", |_| probe.runs_of("a").len() >= 2)
        .await;
    let (triggers, attempt, _) = probe.runs_of("a")[1].clone();
    assert_eq!(attempt, 2);
    assert_eq!(triggers, [Trigger::Changed, Trigger::Retry]);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn predicates_filter_events() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe::default());
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .predicate(Predicate::generation_changed())
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .until("initial run", |_| probe.runs_of("a").len() == 1)
        .await;
    // Same spec: the generation stays, the predicate drops the update.
    let a = world.sets.get(&"a".into()).expect("exists");
    world.sets.client().update(a).await.expect("updated");
    sleep(Duration::from_secs(10)).await;
    assert_eq!(probe.runs_of("a").len(), 1);
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 9;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("spec change run", |_| probe.runs_of("a").len() == 2)
        .await;
    world.shut_down().await;
}

fn member(name: &str, owner: &str) -> Member {
    Member {
        name: name.into(),
        owner: owner.into(),
        version: Revision::ZERO,
    }
}

/// Passes only the events of members not named `quiet…`.
fn not_quiet() -> Predicate<Member> {
    Predicate::new(|event: &Event<Member>| !event.object().name.starts_with("quiet"))
}

/// Runs `controller` on set `a`; checks that creating a `quiet` member of
/// `a` enqueues nothing and that a `loud` one reconciles `a` for `trigger`.
async fn assert_a_filtered_source(
    mut world: World,
    probe: &Probe,
    controller: Controller<Set, Arc<Probe>>,
    trigger: Trigger,
) {
    world.spawn(controller);
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .until("initial run", |_| probe.runs_of("a").len() == 1)
        .await;
    world
        .members
        .client()
        .create(member("quiet", "a"))
        .await
        .expect("created");
    sleep(Duration::from_secs(10)).await;
    assert_eq!(probe.runs_of("a").len(), 1, "the predicate dropped it");
    world
        .members
        .client()
        .create(member("loud", "a"))
        .await
        .expect("created");
    world
        .until("the loud member's run", |_| probe.runs_of("a").len() == 2)
        .await;
    assert_eq!(probe.runs_of("a")[1].0, [trigger]);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_predicate_on_an_owned_source_filters_its_events() {
    let world = World::new(None);
    let probe = Arc::new(Probe::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .owns(
            Watch::new(world.member_informer.clone()).predicate(not_quiet()),
            |m: &Member| Some(m.owner.clone()),
        )
        .build()
        .expect("valid");
    assert_a_filtered_source(world, &probe, controller, Trigger::Owned).await;
}

#[tokio::test(start_paused = true)]
async fn a_predicate_on_a_watched_source_filters_its_events() {
    let world = World::new(None);
    let probe = Arc::new(Probe::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .watches(
            Watch::new(world.member_informer.clone()).predicate(not_quiet()),
            |m: &Member| vec![m.owner.clone()],
        )
        .build()
        .expect("valid");
    assert_a_filtered_source(world, &probe, controller, Trigger::Mapped).await;
}

#[tokio::test(start_paused = true)]
async fn an_object_moving_to_another_owner_enqueues_both() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe::default());
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .sets
        .client()
        .create(set("b", 1))
        .await
        .expect("created");
    world
        .until("initial runs", |_| {
            probe.runs_of("a").len() == 1 && probe.runs_of("b").len() == 1
        })
        .await;
    world
        .members
        .client()
        .create(member("m", "a"))
        .await
        .expect("created");
    world
        .until("a's run for m", |_| probe.runs_of("a").len() == 2)
        .await;
    let mut m = world.members.get(&"m".into()).expect("exists");
    m.owner = "b".into();
    world.members.client().update(m).await.expect("updated");
    world
        .until("both owners' runs", |_| {
            probe.runs_of("a").len() == 3 && probe.runs_of("b").len() == 2
        })
        .await;
    assert_eq!(probe.runs_of("a")[2].0, [Trigger::Owned], "the old owner");
    assert_eq!(probe.runs_of("b")[1].0, [Trigger::Owned], "the new owner");
    world.shut_down().await;
}

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
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
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
        world
            .sets
            .client()
            .create(set(name, 1))
            .await
            .expect("created");
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
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
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

#[tokio::test(start_paused = true)]
async fn a_cache_that_never_syncs_fails_run_with_the_source_name() {
    let sets = MemoryStore::<Set>::new("never-run");
    let informer = Informer::builder(sets).build().expect("valid");
    let controller = Controller::builder("sets", &informer, Arc::new(Probe::default()))
        .sync_timeout(Duration::from_secs(3))
        .build()
        .expect("valid");
    let err = controller
        .run(CancellationToken::new())
        .await
        .expect_err("never synced");
    assert!(matches!(
        err,
        ControllerError::Informer {
            source: InformerError::SyncTimeout { .. },
            ..
        }
    ));
    let source = std::error::Error::source(&err)
        .expect("a source")
        .to_string();
    assert!(source.contains("never-run"), "{source}");
}

/// Builds a controller named `name` configured by `configure`, and returns
/// why it was refused.
fn refusal(
    name: &str,
    configure: impl FnOnce(
        tend::controller::ControllerBuilder<Set, Arc<Probe>>,
    ) -> tend::controller::ControllerBuilder<Set, Arc<Probe>>,
) -> String {
    let informer = Informer::builder(MemoryStore::<Set>::new("sets"))
        .build()
        .expect("valid");
    let builder = Controller::builder(name, &informer, Arc::new(Probe::default()));
    match configure(builder).build() {
        Err(err @ ControllerError::InvalidConfig { .. }) => err.to_string(),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("the configuration was accepted"),
    }
}

#[test]
fn an_empty_name_is_refused() {
    assert_eq!(
        refusal("", |b| b),
        "controller `` is misconfigured: `name` is empty"
    );
}

#[test]
fn a_zero_resync_period_is_refused() {
    assert_eq!(
        refusal("x", |b| b.resync(Duration::ZERO)),
        "controller `x` is misconfigured: `resync` is zero"
    );
}

#[test]
fn a_zero_reconcile_timeout_is_refused() {
    assert_eq!(
        refusal("x", |b| b.reconcile_timeout(Duration::ZERO)),
        "controller `x` is misconfigured: `reconcile_timeout` is zero"
    );
}

#[test]
fn a_zero_sync_timeout_is_refused() {
    assert_eq!(
        refusal("x", |b| b.sync_timeout(Duration::ZERO)),
        "controller `x` is misconfigured: `sync_timeout` is zero"
    );
}

#[test]
fn a_zero_shutdown_grace_is_refused() {
    assert_eq!(
        refusal("x", |b| b.shutdown_grace(Duration::ZERO)),
        "controller `x` is misconfigured: `shutdown_grace` is zero"
    );
}

#[test]
fn a_concurrency_that_would_exhaust_memory_is_refused() {
    assert_eq!(
        refusal("x", |b| b.concurrency(std::num::NonZeroUsize::MAX)),
        "controller `x` is misconfigured: `concurrency` is above its maximum of 65536"
    );
    let informer = Informer::builder(MemoryStore::<Set>::new("sets"))
        .build()
        .expect("valid");
    let most = std::num::NonZeroUsize::new(65_536).expect("non-zero");
    Controller::builder("x", &informer, Arc::new(Probe::default()))
        .concurrency(most)
        .build()
        .expect("65536 workers are allowed");
}

#[tokio::test(start_paused = true)]
async fn duration_max_for_every_knob_means_never_and_shutdown_still_waits_for_reconciles() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        work: Duration::from_secs(60),
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .resync(Duration::MAX)
            .reconcile_timeout(Duration::MAX)
            .sync_timeout(Duration::MAX)
            .shutdown_grace(Duration::MAX)
            .build()
            .expect("valid"),
    );
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .until("a reconciled", |_| !probe.runs_of("a").is_empty())
        .await;
    // Shutdown waits out the 60 s reconcile: no timeout, an endless grace.
    let start = Instant::now();
    world.shut_down().await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(59) && waited <= Duration::from_secs(60),
        "shutdown took {waited:?}"
    );
    assert_eq!(
        probe.calls.load(Ordering::SeqCst),
        1,
        "the reconcile finished"
    );
    assert_eq!(probe.runs_of("a").len(), 1, "no resync, no timeout retry");
}

#[tokio::test(start_paused = true)]
async fn a_thousand_sets_converge_under_dropped_and_duplicated_events() {
    let mut world = World::new(Some(Duration::from_secs(30)));
    let faults = Faults {
        seed: 42,
        drop: 0.3,
        duplicate: 0.1,
        reorder: 0.05,
        cut_after: NonZeroUsize::new(500),
        delay: None,
    };
    world.sets.set_faults(faults.clone()).expect("valid");
    world.members.set_faults(faults).expect("valid");
    world.spawn(
        Controller::builder("sets", &world.set_informer, Sets::new(&world.members))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .concurrency(NonZeroUsize::new(16).expect("non-zero"))
            .build()
            .expect("valid"),
    );
    for i in 0..1_000 {
        world
            .sets
            .client()
            .create(set(&format!("s{i}"), 1 + i % 3))
            .await
            .expect("created");
    }
    world
        .until("every set has its members", |w| {
            let members = w.members.snapshot().objects;
            let mut count: HashMap<&str, usize> = HashMap::new();
            for m in &members {
                *count.entry(m.owner.as_str()).or_default() += 1;
            }
            (0..1_000).all(|i| count.get(format!("s{i}").as_str()) == Some(&(1 + i % 3)))
        })
        .await;
    world.shut_down().await;
}

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
    world
        .sets
        .client()
        .create(set("a", 1))
        .await
        .expect("created");
    world
        .sets
        .client()
        .create(set("b", 1))
        .await
        .expect("created");
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
    world
        .sets
        .client()
        .create(set("hang", 0))
        .await
        .expect("created");
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
