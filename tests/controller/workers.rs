//! Per-key exclusion across workers.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_key_is_never_reconciled_by_two_workers_at_once() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        work: Duration::from_millis(30),
        ..Probe::default()
    });
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .concurrency(NonZeroUsize::new(8).expect("non-zero"))
        .build()
        .expect("valid");
    world.spawn(controller);
    for name in ["a", "b", "c"] {
        world.create_set(name, 1).await;
    }
    let mut last_update = Instant::now();
    for round in 0..200 {
        for name in ["a", "b", "c"] {
            let mut s = world.sets.get(&name.into()).expect("exists");
            s.replicas = round;
            world.sets.client().update(s).await.expect("updated");
        }
        last_update = Instant::now();
        sleep(Duration::from_millis(7)).await;
    }
    sleep(Duration::from_secs(1)).await;
    assert_eq!(probe.overlaps.load(Ordering::SeqCst), 0);
    // Updates during a reconcile were coalesced, never lost: each key's last
    // run started after its last update, and read it.
    let seen = probe.last_seen.lock().expect("not poisoned").clone();
    for name in ["a", "b", "c"] {
        let runs = probe.runs_of(name);
        assert!(
            runs.len() >= 10 && runs.len() < 200,
            "{name}: {} runs",
            runs.len()
        );
        let (_, _, started) = runs.last().expect("runs");
        assert!(
            *started >= last_update,
            "{name}: last run started {:?} before the last update",
            last_update - *started
        );
        assert_eq!(seen[name], Some(199), "{name}: the last run's object");
    }
    world.shut_down().await;
}
