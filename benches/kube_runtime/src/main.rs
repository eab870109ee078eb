//! tend against kube-runtime 5.0 (the same kube client) on a real API
//! server and etcd (`tend::testing::kube`), in one run, with a no-op
//! reconciler that reads the object:
//!
//! - sync: the time from start until each of 10k ConfigMaps has been
//!   reconciled once (list, cache, queue, reconcile), median of 3 runs,
//!   the two runtimes alternating;
//! - latency: 1k updates paced 5 ms apart, from just before the update is
//!   sent to the start of the reconcile that sees it (p50, p99).
//!
//! ```sh
//! TEND_KUBE_APISERVER_BIN=… cargo run --release --manifest-path benches/kube_runtime/Cargo.toml
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action as KubeAction, Controller as KubeController};
use kube::runtime::watcher;
use tend::Informer;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::kube::KubeSource;
use tend::testing::kube::ControlPlane;
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const OBJECTS: usize = 10_000;
const UPDATES: usize = 1_000;
const RUNS: usize = 3;
const NAMESPACE: &str = "bench";
const PACE: Duration = Duration::from_millis(5);

/// What both reconcilers report: how many ran, and the latency of each
/// paced update seen.
#[derive(Default)]
struct Probe {
    reconciles: AtomicUsize,
    sent: Mutex<HashMap<(String, String), Instant>>,
    latencies: Mutex<Vec<Duration>>,
}

impl Probe {
    fn saw(&self, map: &ConfigMap) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        let seq = map.data.as_ref().and_then(|d| d.get("seq")).cloned();
        let (Some(name), Some(seq)) = (map.metadata.name.clone(), seq) else {
            return;
        };
        let sent = self.sent.lock().expect("not poisoned").remove(&(name, seq));
        if let Some(sent) = sent {
            self.latencies
                .lock()
                .expect("not poisoned")
                .push(sent.elapsed());
        }
    }

    async fn wait_for(&self, reconciles: usize) {
        while self.reconciles.load(Ordering::Relaxed) < reconciles {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

struct TendNoOp(Arc<Probe>);

impl Reconciler<ConfigMap> for TendNoOp {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        if let Some(map) = ctx.object() {
            self.0.saw(map);
        }
        Ok(Action::Done)
    }
}

async fn kube_reconcile(map: Arc<ConfigMap>, probe: Arc<Probe>) -> Result<KubeAction, Infallible> {
    probe.saw(&map);
    Ok(KubeAction::await_change())
}

fn kube_error_policy(_: Arc<ConfigMap>, _: &Infallible, _: Arc<Probe>) -> KubeAction {
    KubeAction::await_change()
}

/// Runs tend until `stop`; `probe` sees every reconcile.
async fn run_tend(client: kube::Client, probe: Arc<Probe>, stop: CancellationToken) {
    let source = KubeSource::<ConfigMap>::namespaced(client, NAMESPACE);
    let informer = Informer::builder(source).build().expect("valid");
    let controller = Controller::builder("bench", &informer, TendNoOp(probe))
        .build()
        .expect("valid");
    let running = {
        let (informer, stop) = (informer.clone(), stop.clone());
        tokio::spawn(async move { informer.run(stop).await })
    };
    controller.run(stop).await.expect("ran");
    running.await.expect("joined").expect("informer ran");
}

/// Runs kube-runtime until `stop`; `probe` sees every reconcile.
async fn run_kube(client: kube::Client, probe: Arc<Probe>, stop: CancellationToken) {
    let maps: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    KubeController::new(maps, watcher::Config::default())
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(kube_reconcile, kube_error_policy, probe)
        .for_each(|_| async {})
        .await;
}

#[derive(Clone, Copy)]
enum Runtime {
    Tend,
    Kube,
}

async fn start(
    runtime: Runtime,
    client: &kube::Client,
) -> (Arc<Probe>, CancellationToken, tokio::task::JoinHandle<()>) {
    let probe = Arc::new(Probe::default());
    let stop = CancellationToken::new();
    let (client, p, s) = (client.clone(), Arc::clone(&probe), stop.clone());
    let task = match runtime {
        Runtime::Tend => tokio::spawn(run_tend(client, p, s)),
        Runtime::Kube => tokio::spawn(run_kube(client, p, s)),
    };
    (probe, stop, task)
}

/// Seconds until every object was reconciled once.
async fn sync(runtime: Runtime, client: &kube::Client) -> f64 {
    let clock = Instant::now();
    let (probe, stop, task) = start(runtime, client).await;
    probe.wait_for(OBJECTS).await;
    let elapsed = clock.elapsed().as_secs_f64();
    stop.cancel();
    task.await.expect("joined");
    elapsed
}

/// p50 and p99 of update → reconcile, in milliseconds.
async fn latency(runtime: Runtime, client: &kube::Client, round: usize) -> (f64, f64) {
    let (probe, stop, task) = start(runtime, client).await;
    probe.wait_for(OBJECTS).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..UPDATES {
        let name = format!("m{}", i * 7 % OBJECTS);
        let seq = format!("{round}-{i}");
        probe
            .sent
            .lock()
            .expect("not poisoned")
            .insert((name.clone(), seq.clone()), Instant::now());
        let patch = serde_json::json!({ "data": { "seq": seq } });
        maps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patched");
        tokio::time::sleep(PACE).await;
    }
    let seen = || probe.latencies.lock().expect("not poisoned").len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen() < UPDATES && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    task.await.expect("joined");
    let mut latencies = probe.latencies.lock().expect("not poisoned").clone();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    (at(0.5).as_secs_f64() * 1e3, at(0.99).as_secs_f64() * 1e3)
}

async fn seed(client: &kube::Client) -> Result<(), BoxError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let creates = (0..OBJECTS).map(|i| {
        let maps = maps.clone();
        async move {
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(format!("m{i}")),
                    ..ObjectMeta::default()
                },
                data: Some([("payload".to_owned(), "x".repeat(64))].into()),
                ..ConfigMap::default()
            };
            maps.create(&PostParams::default(), &map).await.map(drop)
        }
    });
    let results: Vec<_> = futures::stream::iter(creates)
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(())
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    let seeding = Instant::now();
    seed(&client).await?;
    println!(
        "seeded {OBJECTS} ConfigMaps in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let (mut tend, mut kube) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Alternate who goes first: the API server's caches warm up.
        let order = if run % 2 == 0 {
            [Runtime::Tend, Runtime::Kube]
        } else {
            [Runtime::Kube, Runtime::Tend]
        };
        for runtime in order {
            let seconds = sync(runtime, &client).await;
            match runtime {
                Runtime::Tend => tend.push(seconds),
                Runtime::Kube => kube.push(seconds),
            }
        }
    }
    let (tend, kube) = (median(tend), median(kube));
    println!(
        "sync {OBJECTS}: tend {tend:.3} s, kube-runtime {kube:.3} s ({:.1}x)",
        kube / tend
    );
    let (tend_p50, tend_p99) = latency(Runtime::Tend, &client, 0).await;
    let (kube_p50, kube_p99) = latency(Runtime::Kube, &client, 1).await;
    println!(
        "latency {UPDATES} updates: tend p50 {tend_p50:.2} ms p99 {tend_p99:.2} ms; kube-runtime p50 {kube_p50:.2} ms p99 {kube_p99:.2} ms"
    );
    Ok(())
}
