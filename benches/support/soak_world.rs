//! The soak's world: the store, the leader-elected manager and its
//! controller, the churn, the depositions, and what a sample reads.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tend::client::{Client, ClientError};
use tend::controller::{Action, Context, ErrorPolicy, Footprint, Reconciler, TableSizes};
use tend::manager::Manager;
use tend::memory::{MemoryElectionGroup, MemoryStore};
use tend::{CancellationToken, Informer, ObjectKey, Revision};
use tokio::task::JoinHandle;

/// Keys at the start, and the id space the churn draws from: it deletes
/// 30 % of the ids it finds and creates the ones it does not, which holds
/// the count near `KEYS`.
const KEYS: u64 = 100_000;
const IDS: u64 = KEYS * 13 / 10;
/// Churn operations per second, in ticks of 10 ms.
const PER_TICK: u64 = 10;
const DEPOSE_EVERY: Duration = Duration::from_secs(60);
const RECONCILE_TIMEOUT: Duration = Duration::from_millis(300);

#[derive(Debug, Clone)]
pub(crate) struct Item {
    key: ObjectKey,
    spec: u64,
    status: u64,
    payload: String,
    version: Revision,
}

tend::impl_object!(Item, key: key: ObjectKey, version: version);

fn item(id: u64, spec: u64) -> Item {
    Item {
        key: ObjectKey::new(format!("tenant-{:02}", id % 50), format!("item-{id:07}")),
        spec,
        status: 0,
        payload: format!("{id:016}").repeat(12),
        version: Revision::ZERO,
    }
}

/// What a reconcile of a key at a spec does, by a hash of both: shares per
/// ten thousand, low enough that the retries (about 3 a second) stay under
/// the default rate limiter's overall 10 a second, which would otherwise
/// push them ever later while the churn goes on.
enum Fate {
    Fail,
    Terminal,
    Panic,
    Slow,
    Write,
}

fn fate(key: &ObjectKey, spec: u64, attempt: u32) -> Fate {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (key, spec).hash(&mut hasher);
    match (hasher.finish() % 10_000, attempt) {
        (0..5, 1..=2) => Fate::Fail,
        (5..8, _) => Fate::Terminal,
        (8..10, 1) => Fate::Panic,
        (10..12, 1) => Fate::Slow,
        _ => Fate::Write,
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SoakError {
    #[error("injected failure")]
    Injected,
    #[error("injected terminal failure")]
    Terminal,
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Counts its reconciles.
#[derive(Clone, Default)]
struct Soak(Arc<AtomicU64>);

/// The payload of an injected panic, which the soak's panic hook keeps
/// quiet.
pub(crate) struct InjectedPanic;

/// Prints every panic but the injected ones.
pub(crate) fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<InjectedPanic>() {
            default(info);
        }
    }));
}

impl Reconciler<Item> for Soak {
    type Error = SoakError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, SoakError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        let (key, spec) = match (ctx.object(), ctx.deleted()) {
            (Some(item), _) => (&item.key, item.spec),
            (None, Some(last)) => (&last.key, u64::MAX),
            (None, None) => return Ok(Action::Done),
        };
        match fate(key, spec, ctx.attempt()) {
            Fate::Fail => return Err(SoakError::Injected),
            Fate::Terminal => return Err(SoakError::Terminal),
            Fate::Panic => std::panic::panic_any(InjectedPanic),
            Fate::Slow => tokio::time::sleep(RECONCILE_TIMEOUT * 3).await,
            Fate::Write => {}
        }
        if let Some(item) = ctx.object() {
            std::hint::black_box(item.payload.len());
        }
        if let Some(item) = ctx.object().filter(|item| item.status != item.spec) {
            let items = ctx.client::<Item>().expect("a client of items");
            let done = Item {
                status: item.spec,
                ..Item::clone(item)
            };
            items.update(done).await?;
        }
        Ok(Action::Done)
    }

    fn error_policy(&self, error: &SoakError) -> ErrorPolicy {
        match error {
            SoakError::Terminal => ErrorPolicy::Terminal,
            _ => ErrorPolicy::Retry,
        }
    }
}

/// One row of the soak's CSV.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) at: Duration,
    pub(crate) keys: usize,
    reconciles: u64,
    heap: usize,
    rss: usize,
    tasks: usize,
    tables: TableSizes,
}

/// What a figure's growth is compared with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Base {
    Mean,
    Keys,
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Base::Mean => "its mean",
            Base::Keys => "the keys",
        })
    }
}

impl Sample {
    /// The CSV's header: the sample's own columns, then each table's
    /// (`TableSizes::by_name`).
    pub(crate) fn header() -> String {
        let tables = TableSizes::default().by_name().map(|(name, _)| name);
        format!(
            "seconds,keys,reconciles,heap_bytes,rss_bytes,tasks,{}",
            tables.join(",")
        )
    }

    pub(crate) fn row(&self) -> String {
        let tables = self.tables.by_name().map(|(_, size)| size.to_string());
        format!(
            "{:.0},{},{},{},{},{},{}",
            self.at.as_secs_f64(),
            self.keys,
            self.reconciles,
            self.heap,
            self.rss,
            self.tasks,
            tables.join(",")
        )
    }

    /// Every figure the verdict checks, with what its growth is compared
    /// with: the heap, the RSS, the tasks and each table.
    pub(crate) fn figures(&self) -> Vec<(&'static str, usize, Base)> {
        let own = [
            ("heap", self.heap, Base::Mean),
            ("RSS", self.rss, Base::Mean),
            ("tasks", self.tasks, Base::Keys),
        ];
        let tables = self
            .tables
            .by_name()
            .map(|(name, size)| (name, size, Base::Keys));
        own.into_iter().chain(tables).collect()
    }

    /// The tables not back to 0 (hot-key counts aside: pruned only after
    /// two idle windows).
    pub(crate) fn tables_left(&self) -> Vec<String> {
        self.tables
            .by_name()
            .into_iter()
            .filter(|&(name, size)| name != "hot_keys" && size > 0)
            .map(|(name, size)| format!("{name} {size}"))
            .collect()
    }
}

/// The resident set, from `/proc/self/statm` (0 where there is none).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

pub(crate) struct World {
    items: MemoryStore<Item>,
    footprint: Footprint<ObjectKey>,
    reconciles: Arc<AtomicU64>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    manager: JoinHandle<()>,
}

impl World {
    /// Seeds the keys, starts the manager, the churn and the depositions.
    pub(crate) async fn start() -> Self {
        let items = MemoryStore::new("items");
        for id in 0..KEYS {
            items.put(item(id, 1));
        }
        let soak = Soak::default();
        let election = MemoryElectionGroup::new("soak");
        let candidate = election.candidate();
        let fenced = items.client_fenced_by(&candidate);
        let mut manager = Manager::builder()
            .leader_election(candidate)
            .campaign_again(true)
            .build()
            .expect("manager");
        let informer = manager
            .informer("items", || Informer::builder(items.clone()).build())
            .expect("informer");
        let controller = manager
            .controller("soak", &informer, soak.clone())
            .client(fenced)
            .reconcile_timeout(RECONCILE_TIMEOUT)
            .build()
            .expect("controller");
        let footprint = controller.footprint();
        manager.add_controller(controller).expect("added");
        let stop = manager.shutdown_token();
        let manager = tokio::spawn(async move { manager.run().await.expect("manager runs") });
        let tasks = vec![
            tokio::spawn(churn(items.client(), items.clone(), stop.clone())),
            tokio::spawn(depose(election, stop.clone())),
        ];
        Self {
            items,
            footprint,
            reconciles: soak.0,
            stop,
            tasks,
            manager,
        }
    }

    pub(crate) fn sample(&self, at: Duration, heap: usize) -> Sample {
        let metrics = tokio::runtime::Handle::current().metrics();
        Sample {
            at,
            keys: self.items.len(),
            reconciles: self.reconciles.load(Ordering::Relaxed),
            heap,
            rss: rss(),
            tasks: metrics.num_alive_tasks(),
            tables: self.footprint.sizes(),
        }
    }

    /// Stops the churn and the depositions, waits until every table but the
    /// hot keys' is empty (at most a minute), and samples.
    pub(crate) async fn settle(&self) -> Sample {
        for task in &self.tasks {
            task.abort();
        }
        let start = tokio::time::Instant::now();
        let limit = Duration::from_secs(60);
        while start.elapsed() < limit && !self.sample(start.elapsed(), 0).tables_left().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.sample(start.elapsed(), 0)
    }

    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(60), self.manager).await;
    }
}

/// Creates, updates and deletes items at a steady rate, until `stop`.
async fn churn(client: Client<Item>, items: MemoryStore<Item>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut rng = fastrand::Rng::with_seed(7);
    while !stop.is_cancelled() {
        tick.tick().await;
        for _ in 0..PER_TICK {
            let id = rng.u64(0..IDS);
            let key = item(id, 0).key;
            let result: Result<(), ClientError> = match items.get(&key) {
                Some(_) if rng.u8(0..10) < 3 => client.delete(&key).await.map(drop),
                Some(old) => {
                    let spec = old.spec + 1;
                    client
                        .update(Item {
                            spec,
                            ..Item::clone(&old)
                        })
                        .await
                        .map(drop)
                }
                None => client.create(item(id, 1)).await.map(drop),
            };
            // A conflict with the controller's write: the next tick goes on.
            let _: Result<(), ClientError> = result;
        }
    }
}

/// Deposes the leader every minute; it campaigns again.
async fn depose(election: MemoryElectionGroup, stop: CancellationToken) {
    let mut tick = tokio::time::interval(DEPOSE_EVERY);
    tick.tick().await;
    while !stop.is_cancelled() {
        tick.tick().await;
        election.depose();
    }
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World").finish_non_exhaustive()
    }
}
