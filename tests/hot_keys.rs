//! Hot keys: two controllers that each set one field to their own value,
//! a reconciler that writes a new timestamp on every run, and a busy but
//! healthy key (many changes from outside, few writes), on the paused
//! clock; then spacing, with no change lost.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tend::controller::{Action, Context, Controller, HotKeyPolicy, Reconciler, Trigger};
use tend::memory::MemoryStore;
use tend::{CancellationToken, Informer, Revision};
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Default)]
struct Site {
    name: String,
    color: String,
    stamp: u64,
    spec: u64,
    status: u64,
    version: Revision,
}

tend::impl_object!(Site, key: name: String, version: version);

/// Sets `color` to its own, when it differs.
struct Painter(&'static str);

impl Reconciler<Site> for Painter {
    type Error = tend::client::ClientError;

    async fn reconcile(&self, ctx: Context<Site>) -> Result<Action, Self::Error> {
        let (Some(site), Some(client)) = (ctx.object(), ctx.client::<Site>()) else {
            return Ok(Action::Done);
        };
        if site.color != self.0 {
            let mut site = (**site).clone();
            site.color = self.0.to_owned();
            client.update(site).await?;
        }
        Ok(Action::Done)
    }
}

/// The stamps a [`Stamper`] writes at most: unspaced, its loop ends there
/// (and the paused clock can move again), rather than hang the test.
const STAMPS: u64 = 200;

/// Writes a new stamp on every run (up to [`STAMPS`]); counts its runs and
/// the last spec seen.
#[derive(Default)]
struct Stamper {
    runs: AtomicU64,
    spec_seen: AtomicU64,
}

impl Reconciler<Site> for Arc<Stamper> {
    type Error = tend::client::ClientError;

    async fn reconcile(&self, ctx: Context<Site>) -> Result<Action, Self::Error> {
        let (Some(site), Some(client)) = (ctx.object(), ctx.client::<Site>()) else {
            return Ok(Action::Done);
        };
        let run = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        self.spec_seen.store(site.spec, Ordering::Relaxed);
        if run > STAMPS {
            return Ok(Action::Done);
        }
        let mut site = (**site).clone();
        site.stamp = run;
        client.update(site).await?;
        Ok(Action::Done)
    }
}

/// Writes the status only every 50th spec: many changes, few writes.
struct Calm;

impl Reconciler<Site> for Calm {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Site>) -> Result<Action, Infallible> {
        if let (Some(site), Some(client)) = (ctx.object(), ctx.client::<Site>())
            && site.spec % 50 == 0
            && site.status != site.spec
        {
            let mut site = (**site).clone();
            site.status = site.spec;
            let _ = client.update(site).await;
        }
        Ok(Action::Done)
    }
}

fn store() -> MemoryStore<Site> {
    let store = MemoryStore::new("sites");
    store.put(Site {
        name: "web".into(),
        ..Site::default()
    });
    store
}

fn run<R: Reconciler<Site>>(
    name: &str,
    informer: &Informer<Site>,
    store: &MemoryStore<Site>,
    reconciler: R,
    policy: HotKeyPolicy,
    stop: &CancellationToken,
) -> (tend::controller::HotKeys<String>, JoinHandle<()>) {
    let controller = Controller::builder(name, informer, reconciler)
        .client(store.client())
        .hot_keys(policy)
        .build()
        .unwrap();
    let hot = controller.hot_keys();
    let stop = stop.clone();
    (
        hot,
        tokio::spawn(async move { controller.run(stop).await.unwrap() }),
    )
}

fn start_informer(informer: &Informer<Site>, stop: &CancellationToken) -> JoinHandle<()> {
    let (informer, stop) = (informer.clone(), stop.clone());
    tokio::spawn(async move { informer.run(stop).await.unwrap() })
}

/// Yields until `done`, bounded in real time: a fight keeps every task
/// busy, so the paused clock does not move and a sleep would never end.
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "never: {what}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_controllers_fighting_over_a_field_are_both_flagged() {
    let store = store();
    let informer = Informer::builder(store.clone()).build().unwrap();
    let stop = CancellationToken::new();
    let tasks = [start_informer(&informer, &stop)];
    let policy = HotKeyPolicy::default();
    let (red, red_run) = run("red", &informer, &store, Painter("red"), policy, &stop);
    let (blue, blue_run) = run("blue", &informer, &store, Painter("blue"), policy, &stop);
    until("both flag the key", || {
        !red.hot().is_empty() && !blue.hot().is_empty()
    })
    .await;
    for hot in [&red, &blue] {
        let key = &hot.hot()[0];
        assert_eq!(key.key, "web");
        assert!(key.writes > 30.0, "{key:?}");
        assert_eq!(
            key.woken_by[0].0,
            Trigger::Changed,
            "woken by the other's writes: {key:?}"
        );
        assert_eq!(key.spacing, None, "not spaced by default");
        assert_eq!(hot.episodes(), 1, "logged and counted once per episode");
    }
    stop.cancel();
    for task in tasks.into_iter().chain([red_run, blue_run]) {
        task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconciler_writing_a_timestamp_on_every_run_is_flagged_then_spaced_with_no_change_lost()
{
    let store = store();
    let informer = Informer::builder(store.clone()).build().unwrap();
    let stop = CancellationToken::new();
    let informer_run = start_informer(&informer, &stop);
    let stamper = Arc::new(Stamper::default());
    let policy =
        HotKeyPolicy::new(30, Duration::from_secs(60)).spaced_up_to(Duration::from_secs(8));
    let (hot, controller) = run(
        "stamper",
        &informer,
        &store,
        Arc::clone(&stamper),
        policy,
        &stop,
    );
    until("the key is hot", || !hot.hot().is_empty()).await;
    let runs = stamper.runs.load(Ordering::Relaxed);
    assert!(
        (31..40).contains(&runs),
        "hot just past 30 writes: {runs} runs"
    );

    // Spaced: 1, 2, 4, 8, 8 … s apart, so a minute holds about ten more runs.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let spaced = stamper.runs.load(Ordering::Relaxed) - runs;
    assert!(
        (8..=12).contains(&spaced),
        "{spaced} runs in a minute while spaced"
    );
    assert_eq!(hot.hot()[0].spacing, Some(Duration::from_secs(8)));

    // A change from outside while the key is held: reconciled when the hold ends.
    let mut site = store.get(&"web".to_owned()).unwrap();
    site.spec = 7;
    store.client().update(site).await.unwrap();
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(
        stamper.spec_seen.load(Ordering::Relaxed),
        7,
        "the change reconciled after the hold"
    );
    stop.cancel();
    controller.await.unwrap();
    informer_run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_busy_key_with_few_writes_is_not_flagged() {
    let store = store();
    let informer = Informer::builder(store.clone()).build().unwrap();
    let stop = CancellationToken::new();
    let informer_run = start_informer(&informer, &stop);
    let (hot, controller) = run(
        "calm",
        &informer,
        &store,
        Calm,
        HotKeyPolicy::default(),
        &stop,
    );
    // 600 changes a minute from outside, a write every 50th.
    for spec in 1..=600 {
        let mut site = store.get(&"web".to_owned()).unwrap();
        site.spec = spec;
        store.client().update(site).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(hot.hot().is_empty(), "flagged at change {spec}");
    }
    assert_eq!(store.get(&"web".to_owned()).unwrap().status, 600);
    assert_eq!(hot.episodes(), 0);
    stop.cancel();
    controller.await.unwrap();
    informer_run.await.unwrap();
}

#[test]
fn zero_settings_are_refused() {
    let store = store();
    let informer = Informer::builder(store).build().unwrap();
    for policy in [
        HotKeyPolicy::new(0, Duration::from_secs(60)),
        HotKeyPolicy::new(30, Duration::ZERO),
        HotKeyPolicy::default().spaced_up_to(Duration::ZERO),
    ] {
        let built = Controller::builder("calm", &informer, Calm)
            .hot_keys(policy)
            .build();
        assert!(
            matches!(
                built,
                Err(tend::controller::ControllerError::InvalidConfig {
                    setting: tend::controller::ControllerSetting::HotKeys,
                    ..
                })
            ),
            "{policy:?}"
        );
    }
}
