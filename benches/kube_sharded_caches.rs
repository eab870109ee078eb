//! The memory of sharded replicas on a real API server: 50,000 ConfigMaps
//! of about 1.7 KB, each labelled with its shard (`kube::ShardLabel`), 64
//! shards on an in-process membership, 1, 2 and 3 replicas in this
//! process (as the `sharded_caches` bench, over `KubeSource`s). Three
//! ways: every replica caching every object; caches scoped to the
//! replica's shards, the source sending everything
//! (`InformerBuilder::scope`); and scoped with a label-selected source
//! (`KubeSource::shard_label`), the API server sending each replica its
//! share. Per replica: the settled heap, its peak, the objects sent and
//! left out of the cache, and the API server's peak RSS while they
//! started (above its RSS before).
//!
//! ```sh
//! TEND_KUBE_APISERVER_BIN=… TEND_ETCD_BIN=… cargo bench --features kube --bench kube_sharded_caches
//! ```
//! `TEND_SHARDED_OBJECTS` sets the count (default 50,000).

#[path = "support/kube_maps.rs"]
mod kube_maps;
#[path = "support/memory.rs"]
mod memory;
#[path = "support/sharded.rs"]
mod sharded;

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use tend::kube::{KubeSource, ShardLabel};
use tend::placement::Sharding;
use tend::shard::ShardCount;
use tend::{Informer, ObjectKey};

use sharded::{Measured, SHARDS, measure, medians};

#[global_allocator]
static GLOBAL: memory::Counting = memory::Counting;

const RUNS: usize = 3;

/// How each replica's informer is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    EveryKey,
    Scoped,
    ByLabel,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::EveryKey => "every key",
            Self::Scoped => "scoped",
            Self::ByLabel => "by label",
        }
    }

    fn informer(
        self,
        source: &KubeSource<ConfigMap>,
        label: &ShardLabel,
        sharding: &Sharding,
    ) -> Informer<ConfigMap> {
        let scope = sharding.cache_scope();
        let builder = match self {
            Self::EveryKey => return Informer::builder(source.clone()).build().expect("valid"),
            Self::Scoped => Informer::builder(source.clone()),
            Self::ByLabel => {
                Informer::builder(source.clone().shard_label(label, &scope).expect("counts"))
            }
        };
        builder.scope(scope).build().expect("valid")
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let objects: usize = std::env::var("TEND_SHARDED_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000);
    let (plane, ns, source) = kube_maps::start("sharded").await;
    let label = ShardLabel::new("tend.dev/shard", ShardCount::new(SHARDS).expect("valid"))
        .expect("a label");
    let started = Instant::now();
    kube_maps::fill(&source, &ns, objects, |mut map| {
        let key = ObjectKey::new(
            ns.as_str(),
            map.metadata.name.as_deref().unwrap_or_default(),
        );
        let labels = map.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(label.key().to_owned(), label.value_of(&key));
        map
    })
    .await;
    println!(
        "created {objects} labelled ConfigMaps in {:.1?}",
        started.elapsed()
    );
    let server = plane.apiserver_pid().expect("the API server runs");
    println!("{objects} objects, {SHARDS} shards; per replica, medians of {RUNS}");
    println!(
        "replicas  caches     settled MiB  peak MiB  vs 1 replica  out of scope  API server +MiB  took"
    );
    for mode in [Mode::EveryKey, Mode::Scoped, Mode::ByLabel] {
        print_mode(mode, &source, &label, objects, server).await;
    }
}

/// Measures `mode` at 1, 2 and 3 replicas and prints a line for each.
async fn print_mode(
    mode: Mode,
    source: &KubeSource<ConfigMap>,
    label: &ShardLabel,
    objects: usize,
    server: u32,
) {
    let mib = |bytes: f64| bytes / f64::from(1 << 20);
    let mut one = None;
    for replicas in 1..=3 {
        let cached = if mode == Mode::EveryKey {
            objects * replicas
        } else {
            objects
        };
        let mut server_peaks = Vec::new();
        let mut runs: Vec<Measured> = Vec::new();
        for _ in 0..RUNS {
            let before = memory::reset_resident_peak(server);
            let informer = |sharding: &Sharding| mode.informer(source, label, sharding);
            runs.push(measure(objects, replicas, cached, informer).await);
            let peak = memory::resident(&server.to_string()).1;
            server_peaks.push(peak.saturating_sub(before) as f64);
        }
        let (settled, peak, out_of_scope, took) = medians(&runs);
        let one = *one.get_or_insert(settled);
        println!(
            "{replicas:>8}  {:<10} {:>11.1}  {:>8.1}  {:>12.2}  {out_of_scope:>12.0}  {:>15.1}  {took:.2} s",
            mode.name(),
            mib(settled),
            mib(peak),
            settled / one,
            mib(memory::median(server_peaks)),
        );
    }
}
