//! One measurement, in a process of its own: a runtime over the Pods
//! until each was reconciled once, then its memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action as KubeAction, Controller as KubeController};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tend::Informer;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::kube::{KubeResource, KubeSource, ListMode};
use tokio_util::sync::CancellationToken;

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is the system allocator's with the caller's layout;
// the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: as the caller's contract with `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the runtime's store holds, told after the measurement: objects
/// and their mean size as JSON (to compare the two runtimes' objects).
static STORE: std::sync::OnceLock<Box<dyn Fn() -> (usize, usize) + Send + Sync>> =
    std::sync::OnceLock::new();

fn told<K: serde::Serialize>(objects: &[Arc<K>]) -> (usize, usize) {
    let bytes: usize = objects
        .iter()
        .map(|o| serde_json::to_vec(&**o).map_or(0, |v| v.len()))
        .sum();
    (objects.len(), bytes / objects.len().max(1))
}

/// Live heap bytes now.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed) as isize
}

/// The distinct objects reconciled: a sync is over once each was, once
/// (a count of reconciles would also count repeats).
#[derive(Default)]
pub struct Seen {
    names: std::sync::Mutex<std::collections::HashSet<String>>,
    distinct: AtomicUsize,
}

impl Seen {
    fn saw(&self, name: &str) {
        let mut names = self.names.lock().expect("not poisoned");
        if !names.contains(name) {
            names.insert(name.to_owned());
            self.distinct.store(names.len(), Ordering::Relaxed);
        }
    }

    pub fn count(&self) -> usize {
        self.distinct.load(Ordering::Relaxed)
    }
}

/// Notes each object reconciled (and reads it, as a reconcile would).
pub struct Count(pub Arc<Seen>);

impl<O: tend::Object<Key = tend::ObjectKey>> Reconciler<O> for Count {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<O>) -> Result<Action, Infallible> {
        if ctx.object().is_some() {
            self.0.saw(&ctx.key().name);
        }
        Ok(Action::Done)
    }
}

async fn run_tend<K: KubeResource>(source: KubeSource<K>, transform: bool, seen: Arc<Seen>)
where
    K::DynamicType: Clone + Send + Sync,
{
    let mut builder = Informer::builder(source);
    if transform {
        builder = builder.transform(|mut object: K| {
            object.meta_mut().managed_fields = None;
            object
        });
    }
    let informer = builder.build().expect("an informer");
    let cache = informer.cache();
    let _ = STORE.set(Box::new(move || told(&cache.list())));
    let controller = Controller::builder("count", &informer, Count(seen))
        .build()
        .expect("a controller");
    let stop = CancellationToken::new();
    let watching = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    controller.run(stop).await.expect("ran");
    drop(watching);
}

async fn count<K: kube::Resource>(
    object: Arc<K>,
    seen: Arc<Seen>,
) -> Result<KubeAction, Infallible> {
    seen.saw(&object.name_any());
    Ok(KubeAction::await_change())
}

fn no_retry<K>(_: Arc<K>, _: &Infallible, _: Arc<Seen>) -> KubeAction {
    KubeAction::await_change()
}

async fn run_kube(pods: Api<Pod>, transform: bool, seen: Arc<Seen>) {
    let config = watcher::Config::default();
    if !transform {
        let controller = KubeController::new(pods, config);
        let store = controller.store();
        let _ = STORE.set(Box::new(move || told(&store.state())));
        controller
            .run(count, no_retry, seen)
            .for_each(|_| async {})
            .await;
        return;
    }
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(pods, config).modify(|pod| pod.managed_fields_mut().clear()),
    )
    .applied_objects();
    KubeController::for_stream(stream, reader)
        .run(count, no_retry, seen)
        .for_each(|_| async {})
        .await;
}

/// kube-runtime's own metadata-only mode: an `Api` of `PartialObjectMeta`.
async fn run_kube_metadata(pods: Api<PartialObjectMeta<Pod>>, seen: Arc<Seen>) {
    KubeController::new(pods, watcher::Config::default())
        .run(count, no_retry, seen)
        .for_each(|_| async {})
        .await;
}

/// This process's resident set and its peak, in bytes.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib * 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn client(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a config");
    kube::Client::try_from(config).expect("a client")
}

/// Runs `config` over the `count` Pods of `namespace`; prints `RESULT`
/// with the sync's seconds, RSS and its peak, heap and its peak.
pub async fn run(config: &str, namespace: &str, count: usize, kubeconfig: &Path) {
    let client = client(kubeconfig).await;
    let seen = Arc::new(Seen::default());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let s = Arc::clone(&seen);
    let task = match config {
        "baseline" => None,
        "tend" | "tend-transform" => {
            let source = KubeSource::<Pod>::namespaced(client, namespace);
            Some(tokio::spawn(run_tend(
                source,
                config == "tend-transform",
                s,
            )))
        }
        "tend-paged" => {
            let source =
                KubeSource::<Pod>::namespaced(client, namespace).list_mode(ListMode::Paged);
            Some(tokio::spawn(run_tend(source, false, s)))
        }
        "tend-metadata" => {
            let source = KubeSource::<PartialObjectMeta<Pod>>::namespaced(client, namespace);
            Some(tokio::spawn(run_tend(source, false, s)))
        }
        "kube-runtime" | "kube-runtime-transform" => Some(tokio::spawn(run_kube(
            pods,
            config == "kube-runtime-transform",
            s,
        ))),
        "kube-runtime-metadata" => {
            let pods = Api::<PartialObjectMeta<Pod>>::namespaced(client, namespace);
            Some(tokio::spawn(run_kube_metadata(pods, s)))
        }
        other => panic!("unknown configuration {other}"),
    };
    if task.is_some() {
        while seen.count() < count {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{config}: no sync in 600 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let sync = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, rss_peak) = rss();
    let heap = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    let heap_peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    if let Some(store) = STORE.get() {
        let (objects, json) = store();
        eprintln!("{config}: {objects} objects held, {json} B of JSON each");
    }
    println!("RESULT {sync} {rss} {rss_peak} {heap} {heap_peak}");
    std::process::exit(0);
}
