//! The memory of a sharded replica with 1, 2 and 3 replicas over the same
//! 50,000 ConfigMap-like objects (string keys, about 1.7 KB each), 64
//! shards on an in-process membership: each replica an informer, a
//! sharding and a sharded controller with a no-op reconciler, all in one
//! process. Per replica: the heap the replicas hold once every key was
//! reconciled and every cache holds its owner's share (settled), divided
//! by the number of replicas, with caches scoped to the replica's shards
//! (`Sharding::cache_scope`) and, for the baseline, unscoped (every
//! replica caches every object). The peak is the most heap the replicas
//! held at once while starting (each list of a scoped cache is whole
//! before it is filtered), also per replica.
//!
//! ```sh
//! cargo bench --bench sharded_caches
//! cargo bench --bench sharded_caches -- --objects 10000
//! ```

#[path = "support/config_map.rs"]
mod config_map;
#[path = "support/memory.rs"]
mod memory;
#[path = "support/sharded.rs"]
mod sharded;

use tend::Informer;
use tend::memory::MemoryStore;

use config_map::config_map;
use sharded::{SHARDS, measure, medians};

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

/// Runs of each configuration; medians are printed.
const RUNS: usize = 3;

fn objects() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == "--objects")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(50_000)
}

fn main() {
    let objects = objects();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let store = MemoryStore::new("config-maps");
    for i in 0..objects {
        store.put(config_map(i));
    }
    println!("{objects} objects, {SHARDS} shards; per replica, medians of {RUNS}");
    println!("replicas  caches    settled MiB  peak MiB  settled vs 1 replica  took");
    let mib = |bytes: f64| bytes / f64::from(1 << 20);
    for scoped in [false, true] {
        let mut one = None;
        for replicas in 1..=3 {
            let cached = if scoped { objects } else { objects * replicas };
            let informer = |sharding: &tend::placement::Sharding| {
                let builder = Informer::builder(store.clone()).without_lag_probe();
                let builder = if scoped {
                    builder.scope(sharding.cache_scope())
                } else {
                    builder
                };
                builder.build().expect("valid")
            };
            let runs: Vec<_> = (0..RUNS)
                .map(|_| runtime.block_on(measure(objects, replicas, cached, informer)))
                .collect();
            let (settled, peak, _, took) = medians(&runs);
            let one = *one.get_or_insert(settled);
            let name = if scoped { "scoped" } else { "every key" };
            println!(
                "{replicas:>8}  {name:<9} {:>11.1}  {:>8.1}  {:>20.2}  {took:.2} s",
                mib(settled),
                mib(peak),
                settled / one,
            );
        }
    }
}
