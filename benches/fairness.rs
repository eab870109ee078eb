//! Fair queueing across key groups. Run with `cargo bench --bench fairness`;
//! it prints one line per figure.
//!
//! - `waits`: one noisy tenant with 100,000 ready keys (re-added as they are
//!   served, so its backlog stays) and 100 quiet tenants with 10 keys each,
//!   all queued at once, then the quiet keys re-added at a steady rate, one
//!   worker serving a key per millisecond. The quiet keys' waits, p50/p99,
//!   without and with `group_by`. Time is tokio's paused clock: the figure
//!   is the queue's order, not this machine's speed.
//! - `cost`: the controller bench's initial sync (100k objects) and update
//!   storm (1M updates over 10k keys) with a group function (100 groups)
//!   beside the same without, alternating, as a ratio.

#[path = "support/noop.rs"]
mod noop;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noop::{runtime, storm_run, sync_run};
use tend::WorkQueue;
use tokio::time::Instant;

const NOISY: usize = 100_000;
const TENANTS: usize = 100;
const PER_TENANT: usize = 10;
/// One worker's time per key.
const SERVICE: Duration = Duration::from_millis(1);
/// How often a quiet key is re-added, and for how long.
const READD_EVERY: Duration = Duration::from_millis(10);
const STEADY: Duration = Duration::from_secs(300);

fn selected(name: &str) -> bool {
    std::env::var("TEND_BENCH").map_or(true, |only| only == name)
}

fn main() {
    if selected("waits") {
        let [first, steady] = waits(false);
        let [fair_first, fair_steady] = waits(true);
        println!(
            "fair queueing, 1 tenant with 100k keys and 100 with 10, 1 ms per key: quiet keys' wait p50/p99 queued at once {} without groups, {} with; re-added at a steady rate {} without, {} with",
            show(first),
            show(fair_first),
            show(steady),
            show(fair_steady),
        );
    }
    if selected("cost") {
        cost("queue alone, 100k keys added then served", queue_once);
        cost("initial sync, 100k objects", sync_once);
        cost("update storm, 1M updates over 10k keys", storm_once);
    }
}

fn show((p50, p99): (Duration, Duration)) -> String {
    format!("{p50:.1?}/{p99:.1?}")
}

fn tenant(key: &str) -> &str {
    key.split_once('/').map_or(key, |(tenant, _)| tenant)
}

/// When each pending quiet key was added, and the waits of those served:
/// those queued at once, then those re-added.
#[derive(Default)]
struct Quiet {
    added: HashMap<String, Instant>,
    first: Vec<Duration>,
    steady: Vec<Duration>,
}

/// The quiet keys' wait percentiles, queued at once and re-added.
fn waits(fair: bool) -> [(Duration, Duration); 2] {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut builder = WorkQueue::<String>::builder();
        if fair {
            builder = builder.group_by(|key: &String| tenant(key).to_owned());
        }
        let queue = builder.build();
        let quiet = Arc::new(Mutex::new(Quiet::default()));
        let t0 = Instant::now();
        for n in 0..NOISY {
            queue.add(format!("noisy/{n}"));
        }
        let quiet_keys: Vec<String> = (0..TENANTS * PER_TENANT)
            .map(|n| format!("quiet-{}/{}", n / PER_TENANT, n % PER_TENANT))
            .collect();
        for key in &quiet_keys {
            add_quiet(&queue, &quiet, key);
        }
        let worker = tokio::spawn(serve(queue.clone(), Arc::clone(&quiet), t0));
        let mut tick = tokio::time::interval(READD_EVERY);
        let until = Instant::now() + STEADY;
        for key in quiet_keys.iter().cycle() {
            tick.tick().await;
            if Instant::now() >= until {
                break;
            }
            add_quiet(&queue, &quiet, key);
        }
        while !quiet.lock().expect("not poisoned").added.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        queue.shutdown();
        worker.await.expect("worker");
        let quiet = quiet.lock().expect("not poisoned");
        [percentiles(&quiet.first), percentiles(&quiet.steady)]
    })
}

/// Adds a quiet key, counting its wait from this add unless it is pending.
fn add_quiet(queue: &WorkQueue<String>, quiet: &Mutex<Quiet>, key: &str) {
    let mut quiet = quiet.lock().expect("not poisoned");
    quiet
        .added
        .entry(key.to_owned())
        .or_insert_with(Instant::now);
    queue.add(key.to_owned());
}

/// One worker: a key per `SERVICE`; noisy keys go straight back. A quiet
/// key added at `t0` was queued at once.
async fn serve(queue: WorkQueue<String>, quiet: Arc<Mutex<Quiet>>, t0: Instant) {
    while let Some(key) = queue.get().await {
        if key.starts_with("quiet") {
            let mut quiet = quiet.lock().expect("not poisoned");
            let added = quiet.added.remove(&key).expect("added");
            let wait = added.elapsed();
            let first = added == t0;
            if first {
                quiet.first.push(wait);
            } else {
                quiet.steady.push(wait);
            }
        }
        tokio::time::sleep(SERVICE).await;
        queue.done(&key).expect("in flight");
        if key.starts_with("noisy") {
            queue.add(key);
        }
    }
}

fn percentiles(waits: &[Duration]) -> (Duration, Duration) {
    let mut waits = waits.to_vec();
    waits.sort_unstable();
    let at = |q: f64| waits[((waits.len() as f64) * q) as usize];
    (at(0.50), at(0.99))
}

const RUNS: usize = 21;

/// Runs `once` without and with groups, alternating, `RUNS` times each;
/// prints the medians and the median of the runs' ratios.
fn cost(what: &str, once: fn(Option<u64>) -> Duration) {
    let mut plain = Vec::new();
    let mut grouped = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..RUNS {
        // Each goes first in turn: a run's warm-up does not favour one.
        let (without, with) = if run % 2 == 0 {
            (once(None), once(Some(100)))
        } else {
            let with = once(Some(100));
            (once(None), with)
        };
        ratios.push(with.as_secs_f64() / without.as_secs_f64());
        plain.push(without);
        grouped.push(with);
    }
    for runs in [&mut plain, &mut grouped] {
        runs.sort_unstable();
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{what}, with a group function (100 groups): {:.2?}; without {:.2?}; ratio {:.3} (median of {RUNS}, {:.3}–{:.3})",
        grouped[RUNS / 2],
        plain[RUNS / 2],
        ratios[RUNS / 2],
        ratios[0],
        ratios[RUNS - 1],
    );
}

/// 100k keys added to a queue, then each taken and done.
fn queue_once(groups: Option<u64>) -> Duration {
    runtime().block_on(async {
        let mut builder = WorkQueue::<u64>::builder();
        if let Some(groups) = groups {
            builder = builder.group_by(move |id: &u64| id % groups);
        }
        let queue = builder.build();
        let start = std::time::Instant::now();
        for n in 0..100_000u64 {
            // Keys in no order, as a list from a hash map comes.
            queue.add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        while let Some(key) = queue.get().await {
            queue.done(&key).expect("in flight");
            if queue.is_empty() {
                break;
            }
        }
        start.elapsed()
    })
}

fn sync_once(groups: Option<u64>) -> Duration {
    sync_run(&runtime(), groups)
}

fn storm_once(groups: Option<u64>) -> Duration {
    storm_run(&runtime(), groups).0
}
