//! The manager: shared informers, start and stop order, signals, cache sync
//! failures and leader-election gating.

#[path = "../support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::client::FencingToken;
use tend::controller::{Action, Context, Reconciler};
use tend::manager::{Manager, ManagerError, ManagerSetting, UnsyncedCaches};
use tend::memory::MemoryElectionGroup;
use tend::memory::MemoryStore;
use tend::{Informer, InformerError, SettingError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use widgets::{Widget, eventually, widgets, within};

mod config;
mod leadership;
mod lifecycle;
mod registration;

const LIMIT: Duration = Duration::from_secs(60);

type Log = Arc<Mutex<Vec<String>>>;

/// Records `"{tag} {key}"` (and the fencing token) for every reconcile; keys
/// named `stuck` never finish, and record `"{tag} dropped {key}"` when their
/// reconcile is dropped.
#[derive(Clone)]
struct Recorder {
    tag: &'static str,
    log: Log,
    tokens: Arc<Mutex<Vec<Option<FencingToken>>>>,
}

impl Recorder {
    fn new(tag: &'static str, log: &Log) -> Self {
        Self {
            tag,
            log: Arc::clone(log),
            tokens: Arc::default(),
        }
    }
}

struct OnDrop(Log, String);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.lock().push(std::mem::take(&mut self.1));
    }
}

impl Reconciler<Widget> for Recorder {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        self.log.lock().push(format!("{} {}", self.tag, ctx.key()));
        self.tokens.lock().push(ctx.fencing_token());
        if ctx.key() == "stuck" {
            let _guard = OnDrop(
                Arc::clone(&self.log),
                format!("{} dropped {}", self.tag, ctx.key()),
            );
            std::future::pending::<()>().await;
        }
        Ok(Action::Done)
    }
}

fn count(log: &Log, entry: &str) -> usize {
    log.lock().iter().filter(|e| *e == entry).count()
}

/// Adds a `widgets` controller logging to `log` with shutdown grace
/// `grace`, runs the manager, and waits (bounded) until the reconcile of
/// `stuck` started; returns the shutdown token and the run.
async fn run_until_stuck(
    mut manager: Manager,
    informer: &Informer<Widget>,
    log: &Log,
    grace: Duration,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), ManagerError>>,
) {
    let controller = manager
        .controller("widgets", informer, Recorder::new("reconcile", log))
        .shutdown_grace(grace)
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the reconcile", LIMIT, || {
        count(log, "reconcile stuck") == 1
    })
    .await;
    (shutdown, run)
}

/// Cancels `token` and waits (bounded) until `run` returned cleanly.
async fn stop(
    what: &str,
    token: &CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ManagerError>>,
) {
    token.cancel();
    within(what, LIMIT, run).await.unwrap().unwrap();
}

fn manager() -> tend::manager::ManagerBuilder {
    Manager::builder().without_signals()
}
