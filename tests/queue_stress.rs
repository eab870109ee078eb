//! Many producers and consumers on real threads: no key lost, none handed to
//! two workers at once, and every add after a key's last processing served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tend::{QueueObserver, WorkQueue};
use tokio::task::JoinHandle;

/// Keeps the last depth reported.
#[derive(Default)]
struct LastDepth(std::sync::atomic::AtomicUsize);

impl QueueObserver for LastDepth {
    fn depth(&self, ready: usize) {
        self.0.store(ready, Ordering::SeqCst);
    }
}

const KEYS: usize = 100_000;
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;

struct Ledger {
    seq: AtomicU64,
    /// Per key: a worker holds it now.
    held: Vec<AtomicBool>,
    /// Per key: the sequence number of its last add (taken before adding).
    last_add: Vec<AtomicU64>,
    /// Per key: the sequence number of its last hand-out (taken after getting).
    last_get: Vec<AtomicU64>,
}

impl Ledger {
    fn new() -> Self {
        let counters = || (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        Self {
            seq: AtomicU64::new(1),
            held: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
            last_add: counters(),
            last_get: counters(),
        }
    }

    fn add(&self, queue: &WorkQueue<usize>, key: usize) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        self.last_add[key].fetch_max(seq, Ordering::SeqCst);
        queue.add(key);
    }
}

#[test]
fn no_key_is_lost_or_processed_twice_at_once_under_contention() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let depth = Arc::new(LastDepth::default());
        let queue = WorkQueue::<usize>::builder()
            .observer(depth.clone())
            .build();
        let ledger = Arc::new(Ledger::new());
        let consumers = spawn_consumers(&queue, &ledger);
        let producers = spawn_producers(&queue, &ledger);
        for producer in producers {
            producer.await.expect("producer");
        }
        // Wait (bounded) until every key has been served and nothing is held.
        wait_until_idle(&queue).await;
        // Depth reports arrive in order: the last one says the queue is empty.
        assert_eq!(depth.0.load(Ordering::SeqCst), 0);
        queue.shutdown();
        for consumer in consumers {
            consumer.await.expect("a consumer panicked");
        }
        assert_every_last_add_was_served(&ledger);
        assert_eq!(queue.stats().dropped, 0);
    });
}

/// Workers that check no key is held twice, re-add some keys while they
/// hold them, and yield now and then.
fn spawn_consumers(queue: &WorkQueue<usize>, ledger: &Arc<Ledger>) -> Vec<JoinHandle<()>> {
    (0..CONSUMERS)
        .map(|worker| {
            let (queue, ledger) = (queue.clone(), Arc::clone(ledger));
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(worker as u64);
                while let Some(key) = queue.get().await {
                    let seq = ledger.seq.fetch_add(1, Ordering::SeqCst);
                    ledger.last_get[key].store(seq, Ordering::SeqCst);
                    assert!(
                        !ledger.held[key].swap(true, Ordering::SeqCst),
                        "key {key} handed to two workers at once"
                    );
                    // Re-add some keys while they are being processed.
                    if rng.u8(..) < 40 {
                        ledger.add(&queue, key);
                    }
                    if rng.u8(..) < 8 {
                        tokio::task::yield_now().await;
                    }
                    ledger.held[key].store(false, Ordering::SeqCst);
                    queue.done(&key).expect("held");
                }
            })
        })
        .collect()
}

/// Producers that add every key once and random keys as often.
fn spawn_producers(queue: &WorkQueue<usize>, ledger: &Arc<Ledger>) -> Vec<JoinHandle<()>> {
    (0..PRODUCERS)
        .map(|producer| {
            let (queue, ledger) = (queue.clone(), Arc::clone(ledger));
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(1_000 + producer as u64);
                for i in (producer..KEYS).step_by(PRODUCERS) {
                    ledger.add(&queue, i);
                    ledger.add(&queue, rng.usize(..KEYS));
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect()
}

async fn wait_until_idle(queue: &WorkQueue<usize>) {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let stats = queue.stats();
            if stats.ready == 0 && stats.in_flight == 0 && stats.scheduled == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the queue did not become idle within 120 s");
}

/// Each key's last add was followed by a get.
fn assert_every_last_add_was_served(ledger: &Ledger) {
    for key in 0..KEYS {
        let added = ledger.last_add[key].load(Ordering::SeqCst);
        let served = ledger.last_get[key].load(Ordering::SeqCst);
        assert!(added > 0, "key {key} was never added");
        assert!(
            served > added,
            "key {key}: last add #{added} was not followed by a get (last get #{served})"
        );
    }
}
