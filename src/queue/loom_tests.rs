//! loom models of the core behind its mutex: every interleaving of the
//! steps that workers and handlers run concurrently (those of `wake.rs`, as
//! the shell calls them). Whom those steps wake is modelled in
//! `loom_wakeups.rs`.
//!
//! Run with `RUSTFLAGS="--cfg tend_loom" cargo test --lib --release loom`.

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use super::Priority;
use super::core::Core;
use super::stamp::Stamp;
use super::wake::Look;
use crate::sync::{Mutex, lock};

type Shared = Arc<Mutex<Core<u8>>>;

fn shared() -> Shared {
    Arc::new(Mutex::new(Core::new(Duration::from_secs(10))))
}

fn take(core: &Shared, now: Stamp) -> Option<u8> {
    match lock(core).look(now) {
        Look::Took { handed, .. } => Some(handed.key),
        Look::Sleep { .. } | Look::Closed => None,
    }
}

#[test]
fn an_add_while_processing_is_never_lost() {
    loom::model(|| {
        let now = Stamp::default();
        let core = shared();
        lock(&core).add(1, Priority::NORMAL, (), || now);
        assert_eq!(take(&core, now), Some(1));
        let adder = {
            let core = core.clone();
            thread::spawn(move || {
                lock(&core).add(1, Priority::NORMAL, (), || now);
            })
        };
        lock(&core).end(&1, now).expect("in flight");
        adder.join().expect("adder");
        let core = lock(&core);
        assert_eq!(core.ready_len(), 1, "the add must leave the key ready");
        assert_eq!(core.in_flight_len(), 0);
    });
}

#[test]
fn concurrent_gets_and_an_add_hand_the_key_out_once() {
    loom::model(|| {
        let now = Stamp::default();
        let core = shared();
        let getters: Vec<_> = (0..2)
            .map(|_| {
                let core = core.clone();
                thread::spawn(move || take(&core, now))
            })
            .collect();
        lock(&core).add(1, Priority::NORMAL, (), || now);
        let got = getters
            .into_iter()
            .filter_map(|g| g.join().expect("getter"))
            .count();
        let left = lock(&core).ready_len();
        assert_eq!(got + left, 1, "handed out {got} times, {left} left");
    });
}

#[test]
fn shutdown_during_get_stops_the_worker() {
    loom::model(|| {
        let now = Stamp::default();
        let core = shared();
        let worker = {
            let core = core.clone();
            thread::spawn(move || {
                loop {
                    let look = lock(&core).look(now);
                    match look {
                        Look::Took { handed, .. } => {
                            lock(&core).end(&handed.key, now).expect("in flight");
                        }
                        Look::Closed => return,
                        Look::Sleep { .. } => thread::yield_now(),
                    }
                }
            })
        };
        lock(&core).add(1, Priority::NORMAL, (), || now);
        lock(&core).shut();
        worker.join().expect("worker");
        assert_eq!(lock(&core).in_flight_len(), 0);
    });
}

#[test]
fn a_drain_ends_when_the_last_key_is_done() {
    loom::model(|| {
        let now = Stamp::default();
        let core = shared();
        lock(&core).add(1, Priority::NORMAL, (), || now);
        assert_eq!(take(&core, now), Some(1));
        let worker = {
            let core = core.clone();
            thread::spawn(move || {
                lock(&core).add(1, Priority::NORMAL, (), || now);
                lock(&core).end(&1, now).expect("in flight");
            })
        };
        let (_, epoch) = lock(&core).shut_to_drain();
        while !lock(&core).is_drained(epoch) {
            thread::yield_now();
        }
        worker.join().expect("worker");
        let core = lock(&core);
        assert_eq!(core.in_flight_len(), 0);
        assert_eq!(core.ready_len(), 0, "nothing is queued after shutdown");
    });
}
