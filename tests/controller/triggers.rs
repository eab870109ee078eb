//! The triggers a reconcile reports.

use super::*;

#[tokio::test(start_paused = true)]
async fn triggers_say_why_each_reconcile_ran() {
    let mut world = World::new(None);
    world.create_set("a", 1).await;
    let probe = Arc::new(Probe {
        requeue: Some(Duration::from_secs(60)),
        ..Probe::default()
    });
    spawn_owning_and_watching_members(&mut world, &probe);
    let first = |key: &str, n: usize| ran(&probe, key, n);
    world.until("initial", first("a", 1)).await;
    assert_eq!(probe.runs_of("a")[0].0, [Trigger::Initial]);

    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 5;
    world.sets.client().update(a).await.expect("updated");
    world.until("changed", first("a", 2)).await;
    assert_eq!(probe.runs_of("a")[1].0, [Trigger::Changed]);

    let m = Member {
        name: "m".into(),
        owner: "a".into(),
        version: Revision::ZERO,
    };
    world.members.client().create(m).await.expect("created");
    world.until("owned", first("a", 3)).await;
    assert_eq!(probe.runs_of("a")[2].0, [Trigger::Owned]);
    world.until("mapped", first("watched-by-m", 1)).await;
    assert_eq!(probe.runs_of("watched-by-m")[0].0, [Trigger::Mapped]);

    world.until("requeue", first("a", 4)).await;
    assert_eq!(probe.runs_of("a")[3].0, [Trigger::Requeue]);

    world
        .sets
        .client()
        .delete(&"a".into())
        .await
        .expect("deleted");
    world.until("deleted", first("a", 5)).await;
    assert_eq!(probe.runs_of("a")[4].0, [Trigger::Deleted]);

    assert_a_new_set_is_resynced(&world, &probe).await;
    world.shut_down().await;
}

/// A change that comes before a failed key's retry timer runs the key at
/// once; that run is a retry too (attempt 2), and says so.
#[tokio::test(start_paused = true)]
async fn a_change_before_the_retry_timer_still_reports_the_retry() {
    let mut world = World::new(None);
    world.create_set("a", 1).await;
    let probe = Arc::new(Probe {
        fail_first: 1,
        ..Probe::default()
    });
    let hour = Duration::from_secs(3600);
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .rate_limiter(tend::rate_limit::ExponentialBackoff::new(hour, hour).expect("valid"))
            .build()
            .expect("valid"),
    );
    world
        .until("the first run failed", |_| {
            probe.calls.load(Ordering::SeqCst) >= 1
        })
        .await;
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 2;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("the change ran the key", |_| probe.runs_of("a").len() >= 2)
        .await;
    let (triggers, attempt, _) = probe.runs_of("a")[1].clone();
    assert_eq!(attempt, 2);
    assert_eq!(triggers, [Trigger::Changed, Trigger::Retry]);
    world.shut_down().await;
}

/// A controller of sets that owns members and maps each member `m` to the
/// key `watched-by-m`, with a 1000 s resync.
fn spawn_owning_and_watching_members(world: &mut World, probe: &Arc<Probe>) {
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(probe))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .watches(&world.member_informer, |m: &Member| {
                vec![format!("watched-by-{}", m.name)]
            })
            .resync(Duration::from_secs(1000))
            .build()
            .expect("valid"),
    );
}

/// Whether `key` has been reconciled at least `n` times.
fn ran(probe: &Arc<Probe>, key: &str, n: usize) -> impl Fn(&World) -> bool + use<> {
    let probe = Arc::clone(probe);
    let key = key.to_owned();
    move |_: &World| probe.runs_of(&key).len() >= n
}

/// A set created now is reconciled again by the controller's resync.
async fn assert_a_new_set_is_resynced(world: &World, probe: &Arc<Probe>) {
    world.create_set("b", 1).await;
    world.until("b", ran(probe, "b", 1)).await;
    sleep(Duration::from_secs(1200)).await;
    assert!(
        probe
            .runs_of("b")
            .iter()
            .any(|r| r.0.contains(&Trigger::Resync)),
        "a controller resync within 1000 s ± 10 %"
    );
}
