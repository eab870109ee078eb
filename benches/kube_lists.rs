//! The initial sync of 50,000 ConfigMaps of about 1.7 KB from a real API
//! server, listed through the watch stream (`ListMode::Streaming`) and in
//! pages of 500 (`ListMode::Paged`), the two alternating, three runs each:
//! the time until the informer's cache holds them all, the peak heap of
//! this process while it lists (beyond the heap before), and the peak RSS
//! of the API server while it answers (beyond its RSS before; the kernel's
//! high-water mark, reset before each run).
//!
//! Needs the API server of `tend::testing::kube` and an etcd that lets it
//! stream (3.4.31+ or 3.5.13+; `.ci/run` fetches one):
//!
//! ```sh
//! TEND_KUBE_APISERVER_BIN=… TEND_ETCD_BIN=… cargo bench --features kube --bench kube_lists
//! ```
//! `TEND_LIST_OBJECTS` sets the count (default 50,000).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use tend::kube::{KubeSource, ListMode};
use tend::{CancellationToken, Informer};

#[path = "support/kube_maps.rs"]
mod kube_maps;
#[path = "support/memory.rs"]
mod memory;

use kube_maps::fill;
use memory::median;

#[global_allocator]
static GLOBAL: memory::Counting = memory::Counting;

const RUNS: usize = 3;

/// What one sync measured.
struct Measured {
    took: Duration,
    heap_peak: usize,
    server_peak: u64,
    streamed: bool,
}

async fn sync_once(source: KubeSource<ConfigMap>, server: u32, count: usize) -> Measured {
    let informer = Informer::builder(source.clone())
        .build()
        .expect("an informer");
    let server_before = memory::reset_resident_peak(server);
    let heap_before = memory::reset_peak();
    let stop = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    informer
        .wait_synced(Duration::from_secs(300))
        .await
        .expect("synced");
    let took = started.elapsed();
    let heap_peak = memory::peak() - heap_before;
    let (_, server_peak) = memory::resident(&server.to_string());
    assert_eq!(informer.cache().len(), count, "every object cached");
    stop.cancel();
    running.await.expect("joined").expect("the informer ran");
    Measured {
        took,
        heap_peak,
        server_peak: server_peak.saturating_sub(server_before),
        streamed: source.streams_lists(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count: usize = std::env::var("TEND_LIST_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000);
    let (plane, ns, source) = kube_maps::start("lists").await;
    let started = Instant::now();
    fill(&source, &ns, count, |map| map).await;
    println!("created {count} ConfigMaps in {:.1?}", started.elapsed());
    let server = plane.apiserver_pid().expect("the API server runs");
    let mut figures: BTreeMap<&str, Vec<Measured>> = BTreeMap::new();
    for _ in 0..RUNS {
        for (name, mode) in [
            ("streaming", ListMode::Streaming),
            ("paged", ListMode::Paged),
        ] {
            let measured = sync_once(source.clone().list_mode(mode), server, count).await;
            figures.entry(name).or_default().push(measured);
        }
    }
    println!("{count} objects, medians of {RUNS}:");
    for (name, runs) in &figures {
        let streamed = runs.iter().all(|m| m.streamed);
        let took = median(runs.iter().map(|m| m.took.as_secs_f64()).collect());
        let heap = median(runs.iter().map(|m| m.heap_peak as f64).collect());
        let server = median(runs.iter().map(|m| m.server_peak as f64).collect());
        println!(
            "  {name:<9} sync {took:.3} s, heap peak {:.1} MiB, API server RSS peak +{:.1} MiB{}",
            heap / 1048576.0,
            server / 1048576.0,
            if *name == "streaming" && !streamed {
                " (NOT streamed: the server refused)"
            } else {
                ""
            },
        );
    }
}
