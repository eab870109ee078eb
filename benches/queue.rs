//! Work queue benchmarks, each beside a baseline measured in the same run: a
//! tokio unbounded mpsc carrying the same keys (no dedup, no state).
//!
//! Run with `cargo bench --bench queue`. The contention figure (p99 latency of
//! `add` with 64 workers over 1M keys) is printed after divan's table.

use std::time::{Duration, Instant};

use divan::Bencher;
use divan::counter::ItemsCount;
use tend::WorkQueue;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::mpsc;

fn main() {
    // Order matters: once any runtime pauses its clock (the `timers` group,
    // which divan runs last), tokio's test-util clock takes a lock on every
    // read for the rest of the process; production builds never do.
    contention_p99();
    divan::main();
}

fn current_thread() -> Runtime {
    Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn paused() -> Runtime {
    Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// The dedup storm's runtime: its two workers on one thread, the producer on
/// the bench's own: two busy threads for two cores. With three threads a
/// preempted lock holder stalls the others and the figure swings tenfold
/// between samples (60–750 ms); with two it is stable.
fn one_thread() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("runtime")
}

fn two_threads() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime")
}

/// 1. add → get → done of 100 distinct keys on one task (client-go's BenchmarkQueue).
mod round_trip {
    use super::*;

    const KEYS: u64 = 100;

    #[divan::bench]
    fn work_queue(bencher: Bencher) {
        let runtime = current_thread();
        let queue = WorkQueue::<u64>::new();
        bencher.counter(ItemsCount::new(KEYS)).bench_local(|| {
            runtime.block_on(async {
                for key in 0..KEYS {
                    queue.add(key);
                }
                for _ in 0..KEYS {
                    let key = queue.get().await.expect("key");
                    queue.done(&key).expect("held");
                }
            });
        });
    }

    #[divan::bench]
    fn mpsc_baseline(bencher: Bencher) {
        let runtime = current_thread();
        let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
        bencher.counter(ItemsCount::new(KEYS)).bench_local(|| {
            runtime.block_on(send_then_receive(&tx, &mut rx, KEYS));
        });
    }
}

/// The baseline's work: `keys` keys sent through an mpsc, then received.
async fn send_then_receive(
    tx: &mpsc::UnboundedSender<u64>,
    rx: &mut mpsc::UnboundedReceiver<u64>,
    keys: u64,
) {
    for key in 0..keys {
        tx.send(key).expect("open");
    }
    for _ in 0..keys {
        divan::black_box(rx.recv().await.expect("key"));
    }
}

/// 2. add_after with random delays of 0–10 min, then advance the (paused)
///    clock and drain (client-go's BenchmarkDelayingQueue_AddAfter). Runs
///    last (see `main`).
mod timers {
    use super::*;

    const KEYS: u64 = 10_000;
    const TEN_MINUTES: u64 = 600_000;

    #[divan::bench]
    fn work_queue(bencher: Bencher) {
        let runtime = paused();
        let mut rng = fastrand::Rng::with_seed(7);
        let delays: Vec<_> = (0..KEYS)
            .map(|_| Duration::from_millis(rng.u64(..TEN_MINUTES)))
            .collect();
        bencher.counter(ItemsCount::new(KEYS)).bench_local(|| {
            let queue = WorkQueue::<u64>::new();
            runtime.block_on(async {
                for (key, delay) in (0..KEYS).zip(&delays) {
                    queue.add_after(key, *delay);
                }
                tokio::time::advance(Duration::from_millis(TEN_MINUTES)).await;
                for _ in 0..KEYS {
                    let key = queue.get().await.expect("key");
                    queue.done(&key).expect("held");
                }
            });
        });
    }

    #[divan::bench]
    fn mpsc_baseline(bencher: Bencher) {
        let runtime = current_thread();
        bencher.counter(ItemsCount::new(KEYS)).bench_local(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
            runtime.block_on(send_then_receive(&tx, &mut rx, KEYS));
        });
    }
}

/// 3. Dedup storm: 1M adds over 10k keys while 2 workers, each spending
///    about a microsecond per key (a reconcile is never free), drain. Timed:
///    the producer's adds ("absorbed"); the workers stop when it is done.
mod dedup_storm {
    use super::*;

    const ADDS: u64 = 1_000_000;
    const KEYS: u64 = 10_000;

    /// About a microsecond of work.
    fn work(key: u64) -> u64 {
        (0..200u64).fold(key, |acc, i| divan::black_box(acc.rotate_left(7) ^ i))
    }

    fn key(i: u64) -> u64 {
        i.wrapping_mul(2_654_435_761) % KEYS
    }

    #[divan::bench(sample_count = 10)]
    fn work_queue(bencher: Bencher) {
        let runtime = one_thread();
        bencher.counter(ItemsCount::new(ADDS)).bench_local(|| {
            let queue = WorkQueue::<u64>::new();
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let queue = queue.clone();
                    runtime.spawn(async move {
                        while let Some(key) = queue.get().await {
                            divan::black_box(work(key));
                            queue.done(&key).expect("held");
                        }
                    })
                })
                .collect();
            for i in 0..ADDS {
                queue.add(key(i));
            }
            queue.shutdown();
            runtime.block_on(async {
                for worker in workers {
                    worker.await.expect("worker");
                }
            });
        });
    }

    #[divan::bench(sample_count = 10)]
    fn mpsc_baseline(bencher: Bencher) {
        let runtime = one_thread();
        bencher.counter(ItemsCount::new(ADDS)).bench_local(|| {
            let (tx, rx) = mpsc::unbounded_channel::<u64>();
            let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    runtime.spawn(async move {
                        while let Some(key) = rx.lock().await.recv().await {
                            divan::black_box(work(key));
                        }
                    })
                })
                .collect();
            for i in 0..ADDS {
                tx.send(key(i)).expect("open");
            }
            // Like the queue's shutdown: what is not yet taken is dropped.
            for worker in &workers {
                worker.abort();
            }
            runtime.block_on(async {
                for worker in workers {
                    let _ = worker.await;
                }
            });
        });
    }
}

/// 4. Contention: 1M keys queued, 64 workers each doing get → add → done;
///    prints the p99 latency of `add` beside the p99 of an mpsc send.
fn contention_p99() {
    const KEYS: u64 = 1_000_000;
    const WORKERS: u64 = 64;
    const ROUNDS: u64 = 2_000;
    let runtime = two_threads();
    let queue = WorkQueue::<u64>::new();
    for key in 0..KEYS {
        queue.add(key);
    }
    let (tx, _rx) = mpsc::unbounded_channel::<u64>();
    let latencies = runtime.block_on(async {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (queue, tx) = (queue.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut add = Vec::with_capacity(ROUNDS as usize);
                    let mut send = Vec::with_capacity(ROUNDS as usize);
                    for round in 0..ROUNDS {
                        let key = queue.get().await.expect("key");
                        let fresh = KEYS + w * ROUNDS + round;
                        let start = Instant::now();
                        queue.add(fresh);
                        add.push(start.elapsed());
                        let start = Instant::now();
                        tx.send(fresh).expect("open");
                        send.push(start.elapsed());
                        queue.done(&key).expect("held");
                        if round % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    (add, send)
                })
            })
            .collect();
        let mut add = Vec::new();
        let mut send = Vec::new();
        for worker in workers {
            let (a, s) = worker.await.expect("worker");
            add.extend(a);
            send.extend(s);
        }
        (add, send)
    });
    let p99 = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v[v.len() * 99 / 100]
    };
    let (add, send) = latencies;
    let (add, send) = (p99(add), p99(send));
    println!(
        "contention (1M keys queued, 64 workers): p99 add {add:?}, p99 mpsc send {send:?}, ratio {:.2}",
        add.as_secs_f64() / send.as_secs_f64().max(1e-9)
    );
}
