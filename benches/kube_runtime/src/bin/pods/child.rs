//! One measurement, in a process of its own: a runtime over the Pods
//! until each was reconciled once, then its memory.

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

#[path = "../../../../support/memory.rs"]
mod memory;

#[global_allocator]
static GLOBAL: memory::Counting = memory::Counting;

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
    memory::live() as isize
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
    let before = memory::reset_peak();
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
    let (rss, rss_peak) = memory::resident("self");
    let heap = memory::live().saturating_sub(before);
    let heap_peak = memory::peak().saturating_sub(before);
    if let Some(store) = STORE.get() {
        let (objects, json) = store();
        eprintln!("{config}: {objects} objects held, {json} B of JSON each");
    }
    println!("RESULT {sync} {rss} {rss_peak} {heap} {heap_peak}");
    std::process::exit(0);
}
