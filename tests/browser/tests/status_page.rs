//! The manager's status page in headless Chromium: what it shows against
//! the manager's own state (a key in flight, a stuck key, an error and its
//! message, a key that is markup shown as text), and its live update
//! without a reload.

use std::time::Duration;

use fantoccini::Client;
use serde_json::Value;
use tend::controller::{Action, Context, ErrorPolicy, HotKeyPolicy, Reconciler};
use tend::manager::Manager;
use tend::memory::{MemoryElectionGroup, MemoryStore};
use tend::placement::Placement;
use tend::{Informer, Revision};
use tend_browser_tests::Driver;
use tokio::sync::watch;

/// A key that is markup: the page must show it as text and run none of it.
const MARKUP_KEY: &str =
    "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">";
/// An error message that is markup.
const MESSAGE: &str = "<b>disk</b> full & \"quoted\"";
const LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
struct Site {
    name: String,
    version: Revision,
}

tend::impl_object!(Site, key: name: String, version: version);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(&'static str);

/// `gate` waits until released; `broken` fails for good with [`MESSAGE`];
/// every other key succeeds.
struct Scripted {
    gate: watch::Receiver<bool>,
}

impl Reconciler<Site> for Scripted {
    type Error = Failed;

    async fn reconcile(&self, ctx: Context<Site>) -> Result<Action, Failed> {
        match ctx.key().as_str() {
            "gate" => {
                let mut gate = self.gate.clone();
                let _ = gate.wait_for(|open| *open).await;
                Ok(Action::Done)
            }
            "broken" => Err(Failed(MESSAGE)),
            _ => Ok(Action::Done),
        }
    }

    fn error_policy(&self, _: &Failed) -> ErrorPolicy {
        ErrorPolicy::Terminal
    }
}

/// Writes its object back on every run: a key that never calms down.
struct Rewriter;

impl Reconciler<Site> for Rewriter {
    type Error = tend::client::ClientError;

    async fn reconcile(&self, ctx: Context<Site>) -> Result<Action, Self::Error> {
        if let (Some(site), Some(client)) = (ctx.object(), ctx.client::<Site>()) {
            client.update((**site).clone()).await?;
        }
        Ok(Action::Done)
    }
}

/// What the page shows of the `sites` controller, read from its DOM.
const READ_PAGE: &str = r#"
const c = document.querySelector('[data-controller="sites"]');
if (c === null) return null;
const rows = (selector) => [...c.querySelectorAll(selector)];
return {
  generation: Number(document.body.dataset.generation || 0),
  inFlight: rows('tr.in-flight').map((r) => ({ key: r.dataset.key, stuck: r.classList.contains('stuck') })),
  errors: rows('.errors tr.reconcile').map((r) => ({
    key: r.querySelector('td.key').textContent,
    message: r.querySelector('td.message').textContent,
    markup: r.querySelector('td.message').innerHTML,
  })),
  recent: rows('.recent tr.reconcile').map((r) => [r.querySelector('td.key').textContent, r.querySelector('td.outcome').textContent]),
  inFlightCount: c.querySelector('.in-flight-count').textContent,
  health: document.getElementById('health').textContent,
  election: document.getElementById('election').textContent,
  injected: { scripts: document.scripts.length, images: document.images.length, bold: document.querySelectorAll('main b').length, pwned: window.pwned ?? null },
  marker: window.marker ?? null,
  hotKeys: [...document.querySelectorAll('[data-controller="rotator"] tr.hot-key')].map((r) => r.dataset.key),
};
"#;

/// A manager at work: five sites, `gate` held in flight, `broken` failed.
struct Scene {
    address: std::net::SocketAddr,
    queue: tend::WorkQueue<String, tend::controller::Triggers>,
    journal: tend::controller::Journal<String>,
    open: watch::Sender<bool>,
    shutdown: tend::CancellationToken,
    run: tokio::task::JoinHandle<Result<(), tend::manager::ManagerError>>,
}

/// A second controller, whose one key is hot (spaced, so it stays calm).
fn add_rotator(manager: &mut Manager) {
    let certs = MemoryStore::new("certs");
    certs.put(Site {
        name: "rotating".to_owned(),
        version: Revision::ZERO,
    });
    let informer = manager
        .informer("certs", || Informer::builder(certs.clone()).build())
        .unwrap();
    // Held in flight while spaced: below the stuck bound.
    let policy = HotKeyPolicy::default().spaced_up_to(Duration::from_secs(1));
    let controller = manager
        .controller("rotator", &informer, Rewriter)
        .client(certs.client())
        .hot_keys(policy)
        .build()
        .unwrap();
    manager
        .add_controller_on(controller, Placement::Everywhere)
        .unwrap();
}

fn start() -> Scene {
    let (open, gate) = watch::channel(false);
    let store = MemoryStore::new("sites");
    for name in ["gate", "broken", MARKUP_KEY, "blog", "shop"] {
        store.put(Site {
            name: name.to_owned(),
            version: Revision::ZERO,
        });
    }
    let election = MemoryElectionGroup::new("sites-operator");
    let mut manager = Manager::builder()
        .http_address("127.0.0.1:0".parse().unwrap())
        .stuck_key_after(Duration::from_secs(3))
        .leader_election(election.candidate())
        .without_signals()
        .build()
        .unwrap();
    let address = manager.http_address().expect("bound");
    let informer = manager
        .informer("sites", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("sites", &informer, Scripted { gate })
        .build()
        .unwrap();
    let (queue, journal) = (controller.queue(), controller.journal());
    manager.add_controller(controller).unwrap();
    add_rotator(&mut manager);
    let shutdown = manager.shutdown_token();
    Scene {
        address,
        queue,
        journal,
        open,
        shutdown,
        run: tokio::spawn(manager.run()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_managers_state_and_updates_live() {
    let driver = Driver::start().await;
    let scene = start();
    let browser = driver.browser(1280, 1100).await;
    browser
        .goto(&format!("http://{}/status", scene.address))
        .await
        .expect("open the page");
    let shown = until(
        &browser,
        "the stuck key flagged and the error shown",
        |page| {
            page["inFlight"][0]["stuck"] == true
                && !page["errors"].as_array().is_some_and(Vec::is_empty)
        },
    )
    .await;
    shows_the_managers_state(&shown, &scene);
    if let Ok(path) = std::env::var("TEND_STATUS_SCREENSHOT") {
        let png = browser.screenshot().await.expect("a screenshot");
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }

    // Live: the key ends, and the same page (no reload) shows it.
    browser
        .execute("window.marker = 'same page';", Vec::new())
        .await
        .expect("mark the page");
    let before = shown["generation"].as_u64().unwrap();
    scene.open.send_replace(true);
    let updated = until(&browser, "the key done, without a reload", |page| {
        page["inFlight"].as_array().is_some_and(Vec::is_empty)
            && page["recent"][0] == serde_json::json!(["gate", "success"])
    })
    .await;
    assert_eq!(updated["marker"], "same page");
    assert!(updated["generation"].as_u64().unwrap() > before);
    assert_eq!(updated["health"], "health ok");
    assert_eq!(updated["inFlightCount"], "in flight 0");

    browser.close().await.expect("close the browser");
    scene.shutdown.cancel();
    tokio::time::timeout(LIMIT, scene.run)
        .await
        .expect("the manager stops")
        .unwrap()
        .unwrap();
    drop(driver);
}

/// What the page shows is what the manager holds, and nothing from a key
/// or a message became markup.
fn shows_the_managers_state(shown: &Value, scene: &Scene) {
    let held: Vec<String> = scene.queue.in_flight().into_iter().map(|k| k.key).collect();
    assert_eq!(held, ["gate"]);
    assert_eq!(
        shown["inFlight"],
        serde_json::json!([{ "key": "gate", "stuck": true }])
    );
    assert_eq!(shown["inFlightCount"], "in flight 1");
    assert_eq!(
        shown["health"], "health failing",
        "a stuck key fails /healthz"
    );
    let failure = scene
        .journal
        .failures()
        .pop()
        .expect("the manager recorded the failure");
    assert_eq!(failure.failure.as_deref(), Some(MESSAGE));
    let error = &shown["errors"][0];
    assert_eq!(
        (error["key"].as_str(), error["message"].as_str()),
        (Some("broken"), Some(MESSAGE))
    );
    assert_eq!(
        error["markup"],
        "&lt;b&gt;disk&lt;/b&gt; full &amp; \"quoted\""
    );
    assert!(
        shown["recent"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!([MARKUP_KEY, "success"])),
        "the markup key as text: {}",
        shown["recent"]
    );
    assert_eq!(
        shown["injected"],
        serde_json::json!({ "scripts": 1, "images": 0, "bold": 0, "pwned": null }),
        "nothing from a key or a message became markup"
    );
    let election = shown["election"].as_str().unwrap_or_default();
    assert!(
        election.starts_with("sites-operator: leading with token 1"),
        "{election}"
    );
}

/// Reads the page until `done` holds for it (bounded by [`LIMIT`]).
async fn until(browser: &Client, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = tokio::time::Instant::now();
    loop {
        let page = browser
            .execute(READ_PAGE, Vec::new())
            .await
            .expect("read the page");
        if !page.is_null() && done(&page) {
            return page;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the page never showed {what}; last: {page:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
