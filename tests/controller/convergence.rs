//! Convergence of the replica-set controller, small and at scale.

use super::*;

#[tokio::test(start_paused = true)]
async fn converges_after_create_scale_and_delete_and_recreates_deleted_members() {
    let mut world = World::new(None);
    let controller = Controller::builder("sets", &world.set_informer, Sets::new(&world.members))
        .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
        .build()
        .expect("valid");
    world.spawn(controller);
    world.create_set("web", 4).await;
    world.until("4 members", |w| w.members_of("web") == 4).await;

    let victim = world.members.snapshot().objects[0].name.clone();
    world
        .members
        .client()
        .delete(&victim)
        .await
        .expect("deleted");
    world
        .until("a replacement", |w| w.members_of("web") == 4)
        .await;
    assert!(world.members.get(&victim).is_none());

    let mut web = world.sets.get(&"web".into()).expect("exists");
    web.replicas = 2;
    world.sets.client().update(web).await.expect("updated");
    world
        .until("scaled to 2", |w| w.members_of("web") == 2)
        .await;

    world
        .sets
        .client()
        .delete(&"web".into())
        .await
        .expect("deleted");
    world
        .until("cleaned up", |w| w.members_of("web") == 0)
        .await;
    world.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_thousand_sets_converge_under_dropped_and_duplicated_events() {
    let mut world = World::new(Some(Duration::from_secs(30)));
    let faults = Faults {
        seed: 42,
        drop: 0.3,
        duplicate: 0.1,
        reorder: 0.05,
        cut_after: NonZeroUsize::new(500),
        delay: None,
    };
    world.sets.set_faults(faults.clone()).expect("valid");
    world.members.set_faults(faults).expect("valid");
    world.spawn(
        Controller::builder("sets", &world.set_informer, Sets::new(&world.members))
            .owns(&world.member_informer, |m: &Member| Some(m.owner.clone()))
            .concurrency(NonZeroUsize::new(16).expect("non-zero"))
            .build()
            .expect("valid"),
    );
    for i in 0..1_000 {
        world.create_set(&format!("s{i}"), 1 + i % 3).await;
    }
    world
        .until("every set has its members", |w| {
            let members = w.members.snapshot().objects;
            let mut count: HashMap<&str, usize> = HashMap::new();
            for m in &members {
                *count.entry(m.owner.as_str()).or_default() += 1;
            }
            (0..1_000).all(|i| count.get(format!("s{i}").as_str()) == Some(&(1 + i % 3)))
        })
        .await;
    world.shut_down().await;
}
