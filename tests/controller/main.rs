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

mod cancellation;
mod config;
mod convergence;
mod footprint;
mod groups;
mod lag_hold;
mod latency;
mod predicates;
mod retries;
mod retry_after;
mod runs_of_keys;
mod timeouts;
mod triggers;
mod workers;

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

    /// Creates the set `name` wanting `replicas` members.
    async fn create_set(&self, name: &str, replicas: usize) {
        self.sets
            .client()
            .create(set(name, replicas))
            .await
            .expect("created");
    }

    /// Creates sets `{prefix}0` … `{prefix}{count - 1}`, with no members.
    async fn create_sets(&self, prefix: &str, count: usize) {
        for n in 0..count {
            self.create_set(&format!("{prefix}{n}"), 0).await;
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
