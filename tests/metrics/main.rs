//! The manager's metrics and endpoints, scraped over real loopback HTTP.

#[path = "../support/http.rs"]
mod http;
#[path = "../support/widgets.rs"]
mod widgets;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tend::Informer;
use tend::controller::{Action, Context, ErrorPolicy, Reconciler};
use tend::manager::Manager;
use tend::manager::prometheus_client::metrics::counter::Counter;
use tend::memory::MemoryElectionGroup;

use http::{Exposition, get};
use widgets::{Widget, eventually, widgets, within};

mod bad_requests;
mod debug;
mod groups;
mod page;
mod probes;
mod scripted;

const LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
enum ScriptError {
    #[error("transient failure")]
    Transient,
    #[error("invalid spec")]
    Invalid,
}

/// Acts by key: `ok` succeeds; `err` fails once; `panic` panics once;
/// `requeue` asks for a requeue once; `terminal` fails terminally; `stuck`
/// never finishes.
#[derive(Default, Clone)]
struct Script {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Reconciler<Widget> for Script {
    type Error = ScriptError;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, ScriptError> {
        self.calls.lock().push(ctx.key().clone());
        let first = ctx.attempt() == 1;
        match ctx.key().as_str() {
            "err" if first => Err(ScriptError::Transient),
            "panic" if first => panic!("scripted panic"),
            "requeue" if self.calls.lock().iter().filter(|k| *k == "requeue").count() == 1 => {
                Ok(Action::RequeueAfter(Duration::from_millis(20)))
            }
            "terminal" => Err(ScriptError::Invalid),
            "stuck" => std::future::pending().await,
            _ => Ok(Action::Done),
        }
    }

    fn error_policy(&self, error: &ScriptError) -> ErrorPolicy {
        match error {
            ScriptError::Transient => ErrorPolicy::Retry,
            ScriptError::Invalid => ErrorPolicy::Terminal,
        }
    }
}

/// A running manager serving HTTP: its address, shutdown token and run.
struct Served {
    address: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
    run: tokio::task::JoinHandle<Result<(), tend::manager::ManagerError>>,
}

async fn scrape(address: std::net::SocketAddr) -> Exposition {
    let response = get(address, "/metrics").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Exposition::parse(&response.body)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A manager serving HTTP with one informer over `store` (quick backoff) and
/// a `widgets` controller; returns the controller's queue before the run.
async fn serve(
    store: &tend::memory::MemoryStore<Widget>,
    builder: tend::manager::ManagerBuilder,
    reconcile_timeout: Duration,
    hold: &[&str],
) -> (
    std::net::SocketAddr,
    tend::WorkQueue<String, tend::controller::Triggers>,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<Result<(), tend::manager::ManagerError>>,
) {
    let mut manager = builder
        .http_address("127.0.0.1:0".parse().unwrap())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("widgets", || {
            Informer::builder(store.clone())
                .backoff(
                    Duration::from_millis(10),
                    Duration::from_millis(20),
                    Duration::from_secs(1),
                )
                .build()
        })
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Script::default())
        .reconcile_timeout(reconcile_timeout)
        .shutdown_grace(Duration::from_millis(50))
        .build()
        .unwrap();
    let queue = controller.queue();
    // Held as a wedged worker would: taken before any worker runs, never done.
    for key in hold {
        queue.add((*key).to_owned());
        within("a key", LIMIT, queue.get()).await.expect("a key");
    }
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    (address, queue, shutdown, tokio::spawn(manager.run()))
}

/// GETs `path` until `done` holds for the response (bounded).
async fn get_until(
    address: std::net::SocketAddr,
    path: &str,
    done: impl Fn(&http::Response) -> bool,
) -> http::Response {
    let mut response = get(address, path).await;
    for _ in 0..500 {
        if done(&response) {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        response = get(address, path).await;
    }
    panic!("GET {path} never answered as expected; last: {response:?}");
}

const ODD_KEYS: [&str; 5] = [
    "say \"hi\"",
    "two\nlines",
    "back\\slash",
    "ünïcødé ✓",
    "{\"json\": [1]}",
];
