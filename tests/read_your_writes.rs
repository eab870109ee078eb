//! Read-your-writes: a key's next reconcile never sees a cache older than
//! its own writes, with watch delivery slowed down on purpose; and with it
//! off, the same controllers do see stale caches (so the tests can tell).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tend::client::ClientError;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::{Faults, MemoryStore};
use tend::testing::Harness;
use tend::{Informer, Revision};

const LIMIT: Duration = Duration::from_secs(600);

/// Watches deliver each run of changes up to 50 ms late.
fn slow(seed: u64) -> Faults {
    Faults {
        seed,
        delay: Some(Duration::from_millis(50)),
        ..Faults::default()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Counter {
    name: String,
    count: u64,
    version: Revision,
}

tend::impl_object!(Counter, key: name: String, version: version);

/// Counts to 20 by writing its own object, recording what each reconcile saw.
struct CountsUp(Mutex<Vec<u64>>);

impl Reconciler<Counter> for Arc<CountsUp> {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Counter>) -> Result<Action, ClientError> {
        let (Some(counter), Some(client)) = (ctx.object(), ctx.client::<Counter>()) else {
            return Ok(Action::Done);
        };
        self.0.lock().push(counter.count);
        if counter.count >= 20 {
            return Ok(Action::Done);
        }
        let next = Counter {
            count: counter.count + 1,
            ..(**counter).clone()
        };
        match client.update(next).await {
            // A stale cache: the write is refused, the reconcile retried.
            Err(error) if error.is_conflict() => Ok(Action::RequeueAfter(Duration::ZERO)),
            other => other.map(|_| Action::RequeueAfter(Duration::ZERO)),
        }
    }
}

/// A counting controller over `counters` (faults already set) with
/// read-your-writes on or off, `observer` told of its reconciles; the
/// counter created.
async fn start_counting(
    counters: &MemoryStore<Counter>,
    read_your_writes: Option<Duration>,
    observer: Arc<dyn tend::controller::ControllerObserver>,
) -> (Harness, Informer<Counter>, Arc<CountsUp>) {
    let informer = Informer::builder(counters.clone()).build().expect("valid");
    let seen = Arc::new(CountsUp(Mutex::new(Vec::new())));
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("counts", &informer, Arc::clone(&seen))
            .client(counters.client())
            .read_your_writes(read_your_writes)
            .observer(observer)
            .build()
            .expect("valid"),
    );
    let first = Counter {
        name: "c".into(),
        count: 0,
        version: Revision::ZERO,
    };
    counters.client().create(first).await.expect("created");
    (harness, informer, seen)
}

/// What the counting reconciles saw, with read-your-writes on or off, and
/// how long (on the paused clock) until the caches caught up.
async fn count_up(read_your_writes: Option<Duration>) -> (Vec<u64>, Duration) {
    let counters = MemoryStore::new("counters");
    counters.set_faults(slow(11)).expect("valid faults");
    let start = tokio::time::Instant::now();
    let (mut harness, informer, seen) =
        start_counting(&counters, read_your_writes, Arc::new(Expired::default())).await;
    settle_caught_up(&mut harness, &[(&counters, &informer)]).await;
    let took = start.elapsed();
    harness.shutdown().await.expect("clean");
    let seen = seen.0.lock();
    (seen.clone(), took)
}

/// Settles until every cache has caught up with its store: a quiet queue
/// is not enough while watches deliver up to 50 ms late, run after run.
async fn settle_caught_up<O: tend::Object>(
    harness: &mut Harness,
    caches: &[(&MemoryStore<O>, &Informer<O>)],
) {
    for _ in 0..1_000 {
        harness.settle(LIMIT).await.expect("settled");
        let mut caught_up = true;
        for (store, informer) in caches {
            let written = store.client().list().await.expect("listed").revision;
            caught_up &= informer.cache().revision() >= written;
        }
        if caught_up {
            harness.settle(LIMIT).await.expect("settled");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the caches never caught up with their stores");
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_sees_its_own_last_write_however_slow_the_watch() {
    let bound = Duration::from_secs(10);
    let (seen, took) = count_up(Some(bound)).await;
    let expected: Vec<u64> = (0..=20).collect();
    assert_eq!(
        seen, expected,
        "each reconcile saw the count its last wrote"
    );
    // Each key released as the cache caught up (50 ms at most), not at the
    // bound: the whole count takes less than one bound.
    assert!(took < bound, "counting to 20 took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn without_read_your_writes_a_reconcile_sees_a_stale_cache() {
    let (seen, _) = count_up(None).await;
    let stale = seen.windows(2).filter(|w| w[1] <= w[0]).count();
    assert!(
        stale > 0,
        "no reconcile saw a cache older than its own write: {seen:?}"
    );
}

#[derive(Debug, Clone, PartialEq)]
struct Set {
    name: String,
    replicas: usize,
    version: Revision,
}

tend::impl_object!(Set, key: name: String, version: version);

#[derive(Debug, Clone, PartialEq)]
struct Pod {
    name: String,
    owner: String,
    version: Revision,
}

tend::impl_object!(Pod, key: name: String, version: version);

/// A ReplicaSet controller with no expectations: it trusts the cache.
#[derive(Default)]
struct Replicas {
    next_name: AtomicU64,
    creates: AtomicUsize,
    excess_deletes: AtomicUsize,
}

impl Reconciler<Set> for Arc<Replicas> {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Set>) -> Result<Action, ClientError> {
        let (Some(set), Some(pods), Some(cache)) =
            (ctx.object(), ctx.client::<Pod>(), ctx.cache::<Pod>())
        else {
            return Ok(Action::Done);
        };
        let have = cache.by_index("by_owner", &set.name).expect("indexed");
        for _ in have.len()..set.replicas {
            let name = format!("pod-{}", self.next_name.fetch_add(1, Ordering::Relaxed));
            let pod = Pod {
                name,
                owner: set.name.clone(),
                version: Revision::ZERO,
            };
            pods.create(pod).await?;
            self.creates.fetch_add(1, Ordering::Relaxed);
        }
        for extra in have.iter().skip(set.replicas) {
            match pods.delete(&extra.name).await {
                Ok(_) => {
                    self.excess_deletes.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(Action::Done)
    }
}

const SETS: usize = 1_000;
const REPLICAS: usize = 5;

/// Runs 1,000 sets of 5 pods with slow watches and chaos deletes; returns
/// the controller's creates, its deletes of excess pods, and the chaos
/// deletes.
async fn replicas(read_your_writes: Option<Duration>) -> (usize, usize, usize) {
    let sets = MemoryStore::new("sets");
    let pods = MemoryStore::new("pods");
    sets.set_faults(slow(3)).expect("valid faults");
    pods.set_faults(slow(5)).expect("valid faults");
    let set_informer = Informer::builder(sets.clone()).build().expect("valid");
    let pod_informer = Informer::builder(pods.clone())
        .index("by_owner", |pod: &Pod| vec![pod.owner.clone()])
        .build()
        .expect("valid");
    let replicas = Arc::new(Replicas::default());
    let mut harness = Harness::new();
    harness.informer(&set_informer);
    harness.informer(&pod_informer);
    harness.controller(
        Controller::builder("replicas", &set_informer, Arc::clone(&replicas))
            .owns(&pod_informer, |pod: &Pod| Some(pod.owner.clone()))
            .client(pods.client())
            .concurrency(std::num::NonZeroUsize::new(8).expect("non-zero"))
            .read_your_writes(read_your_writes)
            .build()
            .expect("valid"),
    );
    for i in 0..SETS {
        let set = Set {
            name: format!("set-{i:04}"),
            replicas: REPLICAS,
            version: Revision::ZERO,
        };
        sets.client().create(set).await.expect("created");
    }
    let chaos = chaos_deletes(&pods, 200).await;
    settle_caught_up(&mut harness, &[(&pods, &pod_informer)]).await;
    harness.shutdown().await.expect("clean");
    let live = pods.client().list().await.expect("listed").objects;
    assert_eq!(live.len(), SETS * REPLICAS, "every set converged");
    (
        replicas.creates.load(Ordering::Relaxed),
        replicas.excess_deletes.load(Ordering::Relaxed),
        chaos,
    )
}

/// Deletes `count` random live pods, one every 5 ms; returns how many it
/// deleted.
async fn chaos_deletes(pods: &MemoryStore<Pod>, count: usize) -> usize {
    let mut rng = fastrand::Rng::with_seed(42);
    let client = pods.client();
    let mut deleted = 0;
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let live = client.list().await.expect("listed").objects;
        if live.is_empty() {
            continue;
        }
        let victim = &live[rng.usize(..live.len())];
        if client.delete(&victim.name).await.is_ok() {
            deleted += 1;
        }
    }
    deleted
}

#[tokio::test(start_paused = true)]
async fn a_replicaset_without_expectations_creates_no_duplicates() {
    let (creates, excess, chaos) = replicas(Some(Duration::from_secs(10))).await;
    assert_eq!(excess, 0, "deleted pods it should never have created");
    assert_eq!(
        creates,
        SETS * REPLICAS + chaos,
        "one create per missing pod, none twice"
    );
}

#[tokio::test(start_paused = true)]
async fn without_read_your_writes_the_same_replicaset_creates_duplicates() {
    let (creates, excess, chaos) = replicas(None).await;
    assert!(
        creates > SETS * REPLICAS + chaos && excess > 0,
        "no duplicate creates ({creates} creates, {excess} excess deletes, {chaos} chaos deletes): the test cannot tell"
    );
}

/// Counts the waits that passed their bound.
#[derive(Default)]
struct Expired(AtomicUsize);

impl tend::controller::ControllerObserver for Expired {
    fn read_your_writes_expired(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_its_bound_is_counted_and_the_key_reconciled_anyway() {
    let counters = MemoryStore::new("counters");
    // Watches up to 5 s late, a bound of 100 ms.
    counters
        .set_faults(Faults {
            seed: 1,
            delay: Some(Duration::from_secs(5)),
            ..Faults::default()
        })
        .expect("valid faults");
    let expired = Arc::new(Expired::default());
    let bound = Some(Duration::from_millis(100));
    let (harness, _informer, seen) = start_counting(&counters, bound, expired.clone()).await;
    // Reconciles at once when a wait expires, and the next sees the cache
    // it waited for: the counter still gets there.
    support::wait_until("the counter at 20", LIMIT, || {
        seen.0.lock().last() == Some(&20)
    })
    .await;
    harness.shutdown().await.expect("clean");
    assert!(
        expired.0.load(Ordering::Relaxed) > 0,
        "no wait passed its bound"
    );
}

#[test]
fn a_zero_read_your_writes_bound_is_refused() {
    let informer = Informer::builder(MemoryStore::<Counter>::new("counters"))
        .build()
        .expect("valid");
    let refused = Controller::builder(
        "counts",
        &informer,
        Arc::new(CountsUp(Mutex::new(Vec::new()))),
    )
    .read_your_writes(Some(Duration::ZERO))
    .build()
    .expect_err("a zero bound");
    assert_eq!(
        refused.to_string(),
        "controller `counts` is misconfigured: `read_your_writes` is zero"
    );
}
