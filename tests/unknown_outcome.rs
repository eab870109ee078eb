//! A write whose outcome is unknown (`ClientError::Unavailable`: a create
//! that landed but whose answer was lost, the server then unreachable for
//! a while) is waited for as if it had landed at the backend's head, read
//! once the backend answers: the key's next reconcile sees the write. With
//! read-your-writes off, the same controller creates a second child; a
//! head that cannot be read holds the key only until the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tend::client::{Backend, Client, ClientError, FencingToken};
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::memory::{Faults, MemoryStore};
use tend::testing::Harness;
use tend::{Informer, Revision, Snapshot};
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, PartialEq)]
struct Item {
    name: String,
    /// The parent of a child; `None` for a parent.
    owner: Option<String>,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// The memory store behind a connection that loses the answer of the next
/// create (the create lands), after which the head cannot be read for
/// `unreachable` tries.
struct Lossy {
    store: MemoryStore<Item>,
    inner: Client<Item>,
    lose_next_create: AtomicBool,
    unreachable: u32,
    unreachable_left: AtomicU32,
}

fn lost() -> ClientError {
    ClientError::unavailable("lossy", "connection reset by peer")
}

#[tend::async_trait]
impl Backend for Lossy {
    type Object = Item;

    fn name(&self) -> &str {
        "lossy"
    }

    async fn get(&self, key: &String) -> Result<Option<Item>, ClientError> {
        self.inner.get(key).await
    }

    async fn list(&self) -> Result<Snapshot<Item>, ClientError> {
        self.inner.list().await
    }

    async fn create(&self, object: Item, _: Option<FencingToken>) -> Result<Item, ClientError> {
        let created = self.inner.create(object).await?;
        if self.lose_next_create.swap(false, Ordering::SeqCst) {
            self.unreachable_left
                .store(self.unreachable, Ordering::SeqCst);
            return Err(lost());
        }
        Ok(created)
    }

    async fn update(&self, object: Item, _: Option<FencingToken>) -> Result<Item, ClientError> {
        self.inner.update(object).await
    }

    async fn delete(
        &self,
        key: &String,
        version: Option<Revision>,
        _: Option<FencingToken>,
    ) -> Result<Revision, ClientError> {
        match version {
            Some(version) => self.inner.delete_at(key, version).await,
            None => self.inner.delete(key).await,
        }
    }

    async fn head(&self) -> Result<Option<Revision>, ClientError> {
        let left = self.unreachable_left.load(Ordering::SeqCst);
        if left > 0 {
            self.unreachable_left.store(left - 1, Ordering::SeqCst);
            return Err(lost());
        }
        Ok(Some(self.store.revision()))
    }
}

/// Gives each parent one child, trusting its cache; records when each
/// reconcile started.
struct OneChild {
    names: AtomicU64,
    started: Mutex<Vec<Instant>>,
}

impl Reconciler<Item> for Arc<OneChild> {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, ClientError> {
        let Some(parent) = ctx.object().filter(|item| item.owner.is_none()) else {
            return Ok(Action::Done);
        };
        self.started.lock().push(Instant::now());
        let cache = ctx.cache::<Item>().expect("the primary cache");
        let children = cache.by_index("owner", &parent.name).unwrap_or_default();
        if children.is_empty() {
            let n = self.names.fetch_add(1, Ordering::Relaxed);
            let child = Item {
                name: format!("{}-{n}", parent.name),
                owner: Some(parent.name.clone()),
                version: Revision::ZERO,
            };
            ctx.client::<Item>()
                .expect("a client")
                .create(child)
                .await?;
        }
        Ok(Action::Done)
    }
}

/// One parent reconciled through a connection that loses the answer of
/// its child's create; returns the children made and the reconciles'
/// starts.
async fn run(read_your_writes: Option<Duration>, unreachable: u32) -> (usize, Vec<Instant>) {
    let store = MemoryStore::<Item>::new("items");
    // Watches deliver each run of changes up to 50 ms late.
    store
        .set_faults(Faults {
            seed: 7,
            delay: Some(Duration::from_millis(50)),
            ..Faults::default()
        })
        .expect("valid faults");
    let lossy = Lossy {
        store: store.clone(),
        inner: store.client(),
        lose_next_create: AtomicBool::new(true),
        unreachable,
        unreachable_left: AtomicU32::new(0),
    };
    let informer = Informer::builder(store.clone())
        .index("owner", |item: &Item| {
            item.owner.clone().into_iter().collect()
        })
        .build()
        .expect("valid");
    let reconciler = Arc::new(OneChild {
        names: AtomicU64::new(0),
        started: Mutex::new(Vec::new()),
    });
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(
        Controller::builder("children", &informer, Arc::clone(&reconciler))
            .client(Client::new(lossy))
            .read_your_writes(read_your_writes)
            .build()
            .expect("valid"),
    );
    let parent = Item {
        name: "p".to_owned(),
        owner: None,
        version: Revision::ZERO,
    };
    store.client().create(parent).await.expect("created");
    harness.settle(LIMIT).await.expect("settles");
    let children = store.client().list().await.expect("listed").objects;
    let children = children.iter().filter(|i| i.owner.is_some()).count();
    harness.shutdown().await.expect("stops");
    let started = reconciler.started.lock().clone();
    (children, started)
}

#[tokio::test(start_paused = true)]
async fn a_create_whose_answer_was_lost_is_seen_by_the_next_reconcile() {
    let (children, started) = run(Some(Duration::from_secs(10)), 4).await;
    assert_eq!(children, 1, "one child, however its create's answer went");
    assert!(
        started.len() >= 2,
        "the failed create was retried: {started:?}"
    );
    // Held until the head could be read (four failed reads, 250 ms apart).
    assert!(
        started[1] - started[0] >= Duration::from_millis(750),
        "{started:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_read_your_writes_the_lost_answer_makes_a_second_child() {
    let (children, _) = run(None, 4).await;
    assert_eq!(children, 2, "the retry did not see the child that landed");
}

#[tokio::test(start_paused = true)]
async fn a_head_that_cannot_be_read_holds_the_key_only_until_the_bound() {
    let bound = Duration::from_secs(2);
    let (children, started) = run(Some(bound), u32::MAX).await;
    assert!(
        started.len() >= 2,
        "the failed create was retried: {started:?}"
    );
    let held = started[1] - started[0];
    // Given up once no read could be tried again within the bound.
    let last_try = bound - Duration::from_millis(250);
    assert!(held >= last_try, "held {held:?}, released early");
    assert!(
        held < bound + Duration::from_secs(1),
        "held {held:?}, past the bound"
    );
    assert_eq!(children, 1, "by then the cache showed the child");
}
