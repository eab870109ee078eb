//! Predicates on the primary, owned and watched sources.

use super::*;

#[tokio::test(start_paused = true)]
async fn predicates_filter_events() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe::default());
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .predicate(Predicate::generation_changed())
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world
        .until("initial run", |_| probe.runs_of("a").len() == 1)
        .await;
    // Same spec: the generation stays, the predicate drops the update.
    let a = world.sets.get(&"a".into()).expect("exists");
    world.sets.client().update(a).await.expect("updated");
    sleep(Duration::from_secs(10)).await;
    assert_eq!(probe.runs_of("a").len(), 1);
    let mut a = world.sets.get(&"a".into()).expect("exists");
    a.replicas = 9;
    world.sets.client().update(a).await.expect("updated");
    world
        .until("spec change run", |_| probe.runs_of("a").len() == 2)
        .await;
    world.shut_down().await;
}

fn member(name: &str, owner: &str) -> Member {
    Member {
        name: name.into(),
        owner: owner.into(),
        version: Revision::ZERO,
    }
}

/// Passes only the events of members not named `quiet…`.
fn not_quiet() -> Predicate<Member> {
    Predicate::new(|event: &Event<Member>| !event.object().name.starts_with("quiet"))
}

/// Runs `controller` on set `a`; checks that creating a `quiet` member of
/// `a` enqueues nothing and that a `loud` one reconciles `a` for `trigger`.
async fn assert_a_filtered_source(
    mut world: World,
    probe: &Probe,
    controller: Controller<Set, Arc<Probe>>,
    trigger: Trigger,
) {
    world.spawn(controller);
    world.create_set("a", 1).await;
    world
        .until("initial run", |_| probe.runs_of("a").len() == 1)
        .await;
    world
        .members
        .client()
        .create(member("quiet", "a"))
        .await
        .expect("created");
    sleep(Duration::from_secs(10)).await;
    assert_eq!(probe.runs_of("a").len(), 1, "the predicate dropped it");
    world
        .members
        .client()
        .create(member("loud", "a"))
        .await
        .expect("created");
    world
        .until("the loud member's run", |_| probe.runs_of("a").len() == 2)
        .await;
    assert_eq!(probe.runs_of("a")[1].0, [trigger]);
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_predicate_on_an_owned_source_filters_its_events() {
    let world = World::new(None);
    let probe = Arc::new(Probe::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .owns(
            Watch::new(world.member_informer.clone()).predicate(not_quiet()),
            |m: &Member| Some(m.owner.clone()),
        )
        .build()
        .expect("valid");
    assert_a_filtered_source(world, &probe, controller, Trigger::Owned).await;
}

#[tokio::test(start_paused = true)]
async fn a_predicate_on_a_watched_source_filters_its_events() {
    let world = World::new(None);
    let probe = Arc::new(Probe::default());
    let controller = Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
        .watches(
            Watch::new(world.member_informer.clone()).predicate(not_quiet()),
            |m: &Member| vec![m.owner.clone()],
        )
        .build()
        .expect("valid");
    assert_a_filtered_source(world, &probe, controller, Trigger::Mapped).await;
}

#[tokio::test(start_paused = true)]
async fn an_object_moving_to_another_owner_enqueues_both() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe::default());
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world.create_set("b", 1).await;
    world
        .until("initial runs", |_| {
            probe.runs_of("a").len() == 1 && probe.runs_of("b").len() == 1
        })
        .await;
    world
        .members
        .client()
        .create(member("m", "a"))
        .await
        .expect("created");
    world
        .until("a's run for m", |_| probe.runs_of("a").len() == 2)
        .await;
    let mut m = world.members.get(&"m".into()).expect("exists");
    m.owner = "b".into();
    world.members.client().update(m).await.expect("updated");
    world
        .until("both owners' runs", |_| {
            probe.runs_of("a").len() == 3 && probe.runs_of("b").len() == 2
        })
        .await;
    assert_eq!(probe.runs_of("a")[2].0, [Trigger::Owned], "the old owner");
    assert_eq!(probe.runs_of("b")[1].0, [Trigger::Owned], "the new owner");
    world.shut_down().await;
}
