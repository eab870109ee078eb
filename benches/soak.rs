//! A bounded soak: churn on the memory backend for a set time, sampling
//! what the process holds, to show that nothing grows without bound.
//!
//! 100,000 keys (`ObjectKey`, objects of about 300 B) under a leader-elected
//! `Manager` whose controller writes each object's status through its
//! fenced client (read-your-writes on). A churn task creates, updates and
//! deletes objects at a steady rate around that count; reconciles fail and
//! are retried, fail for good (deleted keys too), panic and time out, each
//! at a fixed share; the leader is deposed every minute and campaigns again.
//! Every 10 s a row goes to `target/soak.csv`: the live heap, the RSS, the
//! runtime's tasks, the store's keys and each per-key table of the
//! controller (`Controller::footprint`). At the end the churn stops, the
//! loop settles, and every table must be back to 0 (hot-key counts aside:
//! pruned after two idle windows).
//!
//! `cargo bench --bench soak` runs 20 minutes; `TEND_SOAK_SECS=60` a minute
//! (CI). The verdict: the tables once settled; and, for a run of at least
//! 10 minutes (a shorter one has not warmed up: hot-key counts, for one,
//! are kept for two minutes after a key's last write), that over its second
//! half the heap and RSS grow by under 1 % of their mean and no table by
//! 1 % of the keys: the floor (least value) of the half's later half
//! against the floor of its earlier one, since a leak raises the floor
//! while some tables swing on a period. `cargo run --release --manifest-path
//! benches/plot/Cargo.toml --bin soak` draws `docs/soak.png` from the CSV.

#[path = "support/soak_world.rs"]
mod soak_world;

use std::alloc::System;
use std::fmt::Write as _;
use std::time::Duration;

use soak_world::{Sample, World};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// How often a row is sampled.
const EVERY: Duration = Duration::from_secs(10);
/// The shortest run whose growth is judged.
const WARMED: Duration = Duration::from_secs(600);

fn main() {
    let secs: u64 = std::env::var("TEND_SOAK_SECS").map_or(1200, |s| {
        s.parse()
            .expect("TEND_SOAK_SECS is a whole number of seconds")
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    soak_world::quiet_injected_panics();
    let region = Region::new(GLOBAL);
    let heap = move || {
        let stats = region.change();
        stats
            .bytes_allocated
            .saturating_sub(stats.bytes_deallocated)
    };
    let (samples, settled) = runtime.block_on(async {
        let world = World::start().await;
        let mut samples = Vec::new();
        let start = tokio::time::Instant::now();
        let end = start + Duration::from_secs(secs);
        while tokio::time::Instant::now() < end {
            tokio::time::sleep(EVERY.min(end - tokio::time::Instant::now())).await;
            let sample = world.sample(start.elapsed(), heap());
            println!("{}", sample.row());
            samples.push(sample);
        }
        let settled = world.settle().await;
        world.stop().await;
        (samples, settled)
    });
    write_csv(&samples);
    let verdict = verdict(&samples, &settled);
    println!("{verdict}");
    if verdict.contains("FAIL") {
        std::process::exit(1);
    }
}

fn write_csv(samples: &[Sample]) {
    let mut csv = format!("{}\n", Sample::header());
    for sample in samples {
        let _ = writeln!(csv, "{}", sample.row());
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak.csv");
    if let Err(error) = std::fs::write(&path, csv) {
        eprintln!("writing {}: {error}", path.display());
    }
}

/// The growth of each figure over the second half, and the tables once
/// settled.
fn verdict(samples: &[Sample], settled: &Sample) -> String {
    let half = &samples[samples.len() / 2..];
    let warmed = samples.last().is_some_and(|s| s.at >= WARMED);
    let mut out = format!(
        "soak verdict ({}):\n",
        if warmed {
            "growth judged"
        } else {
            "shorter than 10 minutes: growth shown, not judged"
        }
    );
    let mut failed = false;
    let keys = settled.keys.max(1) as f64;
    for (at, (name, _, relative_to)) in settled.figures().into_iter().enumerate() {
        let values: Vec<f64> = half.iter().map(|s| s.figures()[at].1 as f64).collect();
        let growth = growth(&values);
        let base = match relative_to {
            soak_world::Base::Mean => values.iter().sum::<f64>() / values.len().max(1) as f64,
            soak_world::Base::Keys => keys,
        };
        let share = if base > 0.0 { growth / base } else { 0.0 };
        let flat = share < 0.01;
        failed |= !flat && warmed;
        let _ = writeln!(
            out,
            "  {name}: {growth:+.0} over the second half ({:+.3} % of {}): {}",
            share * 100.0,
            relative_to,
            match (flat, warmed) {
                (true, _) => "flat",
                (false, true) => "GROWS",
                (false, false) => "rises (not judged)",
            }
        );
    }
    let left = settled.tables_left();
    failed |= !left.is_empty();
    let _ = write!(
        out,
        "  tables once settled: {}\n{}",
        if left.is_empty() {
            "all empty".to_owned()
        } else {
            left.join(", ")
        },
        if failed { "FAIL" } else { "PASS" }
    );
    out
}

/// How much the floor of `values` rose from the first half of the span to
/// the second: what a leak raises, whatever a table's swings (hot-key
/// counts grow and are pruned every two minutes; a table of failing keys
/// spikes and empties).
fn growth(values: &[f64]) -> f64 {
    let (first, second) = values.split_at(values.len() / 2);
    let floor = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    if first.is_empty() || second.is_empty() {
        0.0
    } else {
        floor(second) - floor(first)
    }
}
