//! The opt-in debounce (`ControllerBuilder::debounce`): a burst of changes
//! costs one reconcile a window after its last change; a key that never
//! stops changing is still reconciled once per bound; retries keep their
//! own timing; initial lists are not delayed.

mod support;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::wait_until;
use tend::controller::{
    Action, Context, Controller, ControllerError, ControllerSetting, DEBOUNCE_WINDOWS, Reconciler,
    Trigger,
};
use tend::memory::MemoryStore;
use tend::testing::Harness;
use tend::{Informer, Revision, SettingError};
use tokio::time::{Instant, sleep};

#[derive(Debug, Clone)]
struct Item {
    name: String,
    value: u64,
    version: Revision,
}

tend::impl_object!(Item, key: name: String, version: version);

/// One reconcile as seen: the value read, when, and whether it was a retry.
#[derive(Debug, Clone, Copy)]
struct Run {
    value: u64,
    at: Instant,
    retry: bool,
}

/// Records every reconcile of "a"; fails the first `fail_first` of them.
#[derive(Default)]
struct Recorder {
    runs: Mutex<Vec<Run>>,
    fail_first: usize,
}

impl Recorder {
    fn runs(&self) -> Vec<Run> {
        self.runs.lock().expect("not poisoned").clone()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("scripted failure")]
struct Scripted;

impl Reconciler<Item> for Arc<Recorder> {
    type Error = Scripted;

    async fn reconcile(&self, ctx: Context<Item>) -> Result<Action, Scripted> {
        let mut runs = self.runs.lock().expect("not poisoned");
        runs.push(Run {
            value: ctx.object().map_or(0, |item| item.value),
            at: Instant::now(),
            retry: ctx.triggers().contains(Trigger::Retry),
        });
        if runs.len() <= self.fail_first {
            return Err(Scripted);
        }
        Ok(Action::Done)
    }
}

const WINDOW: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(60);

/// A debounced controller over `items`, its informer and controller run by
/// a harness, synced.
async fn start(items: &MemoryStore<Item>, recorder: &Arc<Recorder>, window: Duration) -> Harness {
    let informer = Informer::builder(items.clone()).build().expect("valid");
    let controller = Controller::builder("debounced", &informer, Arc::clone(recorder))
        .concurrency(NonZeroUsize::MIN)
        .debounce(window)
        .build()
        .expect("valid");
    let mut harness = Harness::new();
    harness.informer(&informer);
    harness.controller(controller);
    harness.settle(LIMIT).await.expect("synced");
    harness
}

/// Writes value `value` to "a"; returns when.
async fn set(items: &MemoryStore<Item>, value: u64) -> Instant {
    items.put(Item {
        name: "a".to_owned(),
        value,
        version: Revision::ZERO,
    });
    // Let the informer deliver the change before the clock moves on.
    tokio::task::yield_now().await;
    Instant::now()
}

/// Waits until `recorder` saw `count` runs, then as long again as the bound
/// to see that no more come.
async fn runs_settle_at(recorder: &Recorder, count: usize) -> Vec<Run> {
    let what = format!("{count} reconciles");
    wait_until(&what, LIMIT, || recorder.runs().len() >= count).await;
    sleep(WINDOW * DEBOUNCE_WINDOWS * 2).await;
    recorder.runs()
}

#[tokio::test(start_paused = true)]
async fn a_burst_within_the_window_is_reconciled_once_at_its_last_version_a_window_after_it() {
    let items = MemoryStore::new("items");
    items.put(Item {
        name: "a".to_owned(),
        value: 0,
        version: Revision::ZERO,
    });
    let recorder = Arc::new(Recorder::default());
    let started = Instant::now();
    let harness = start(&items, &recorder, WINDOW).await;
    let initial = recorder.runs();
    assert_eq!(initial.len(), 1, "{initial:?}");
    assert!(
        initial[0].at - started < WINDOW,
        "the initial list is not debounced: {initial:?}"
    );
    // Ten changes 20 ms apart: each within the window of the last.
    let mut last = Instant::now();
    for value in 1..=10 {
        last = set(&items, value).await;
        sleep(WINDOW / 5).await;
    }
    let runs = runs_settle_at(&recorder, 2).await;
    assert_eq!(runs.len(), 2, "one reconcile for the burst: {runs:?}");
    assert_eq!(runs[1].value, 10, "at the burst's last version");
    let after = runs[1].at - last;
    assert!(
        after >= WINDOW && after < WINDOW + Duration::from_millis(5),
        "a window after the last change, not {after:?}"
    );
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn changes_further_apart_than_the_window_are_reconciled_once_each() {
    let items = MemoryStore::new("items");
    let recorder = Arc::new(Recorder::default());
    let harness = start(&items, &recorder, WINDOW).await;
    let mut changed = Vec::new();
    for value in 1..=3 {
        changed.push(set(&items, value).await);
        sleep(WINDOW * 3).await;
    }
    let runs = runs_settle_at(&recorder, 3).await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    for (run, (value, at)) in runs.iter().zip((1..).zip(&changed)) {
        assert_eq!(run.value, value);
        assert_eq!(run.at - *at, WINDOW, "{runs:?}");
    }
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn a_key_changing_without_end_is_reconciled_at_least_once_per_bound() {
    let items = MemoryStore::new("items");
    let recorder = Arc::new(Recorder::default());
    let harness = start(&items, &recorder, WINDOW).await;
    let bound = WINDOW * DEBOUNCE_WINDOWS;
    let spacing = WINDOW / 2;
    let first = set(&items, 1).await;
    let mut value = 1;
    while Instant::now() - first < bound * 5 {
        sleep(spacing).await;
        value += 1;
        set(&items, value).await;
    }
    let runs = recorder.runs();
    assert!(runs.len() >= 4, "reconciled during the storm: {runs:?}");
    assert!(runs[0].at - first <= bound, "{runs:?}");
    for pair in runs.windows(2) {
        // The next change after a run is at most one spacing later, and
        // its bound counts from there.
        let gap = pair[1].at - pair[0].at;
        assert!(gap <= bound + spacing, "{gap:?} between runs: {runs:?}");
    }
    harness.shutdown().await.expect("clean");
}

#[tokio::test(start_paused = true)]
async fn retries_keep_their_backoff_and_are_not_debounced() {
    let items = MemoryStore::new("items");
    let recorder = Arc::new(Recorder {
        fail_first: 3,
        ..Recorder::default()
    });
    // A window far longer than the default backoff (5 ms, doubling).
    let window = Duration::from_secs(1);
    let harness = start(&items, &recorder, window).await;
    let changed = set(&items, 1).await;
    let runs = runs_settle_at(&recorder, 4).await;
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(runs[0].at - changed, window, "the change is debounced");
    let gaps: Vec<Duration> = runs.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert_eq!(gaps, [5, 10, 20].map(Duration::from_millis), "{runs:?}");
    assert!(runs[1..].iter().all(|run| run.retry), "{runs:?}");
    harness.shutdown().await.expect("clean");
}

#[test]
fn a_zero_debounce_window_is_refused() {
    let items: MemoryStore<Item> = MemoryStore::new("items");
    let informer = Informer::builder(items).build().expect("valid");
    let built = Controller::builder("zero", &informer, Arc::new(Recorder::default()))
        .debounce(Duration::ZERO)
        .build();
    let Err(ControllerError::InvalidConfig { setting, error, .. }) = built else {
        panic!("a zero window was accepted");
    };
    assert_eq!(
        (setting, error),
        (ControllerSetting::Debounce, SettingError::Zero)
    );
}
