//! Configuration that is refused, and knobs set to Duration::MAX.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_cache_that_never_syncs_fails_run_with_the_source_name() {
    let sets = MemoryStore::<Set>::new("never-run");
    let informer = Informer::builder(sets).build().expect("valid");
    let controller = Controller::builder("sets", &informer, Arc::new(Probe::default()))
        .sync_timeout(Duration::from_secs(3))
        .build()
        .expect("valid");
    let err = controller
        .run(CancellationToken::new())
        .await
        .expect_err("never synced");
    assert!(matches!(
        err,
        ControllerError::Informer {
            source: InformerError::SyncTimeout { .. },
            ..
        }
    ));
    let source = std::error::Error::source(&err)
        .expect("a source")
        .to_string();
    assert!(source.contains("never-run"), "{source}");
}

/// Builds a controller named `name` configured by `configure`, and returns
/// why it was refused.
fn refusal(
    name: &str,
    configure: impl FnOnce(
        tend::controller::ControllerBuilder<Set, Arc<Probe>>,
    ) -> tend::controller::ControllerBuilder<Set, Arc<Probe>>,
) -> String {
    let informer = Informer::builder(MemoryStore::<Set>::new("sets"))
        .build()
        .expect("valid");
    let builder = Controller::builder(name, &informer, Arc::new(Probe::default()));
    match configure(builder).build() {
        Err(err @ ControllerError::InvalidConfig { .. }) => err.to_string(),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("the configuration was accepted"),
    }
}

#[test]
fn an_empty_name_is_refused() {
    assert_eq!(
        refusal("", |b| b),
        "controller `` is misconfigured: `name` is empty"
    );
}

#[test]
fn a_zero_resync_period_is_refused() {
    assert_eq!(
        refusal("x", |b| b.resync(Duration::ZERO)),
        "controller `x` is misconfigured: `resync` is zero"
    );
}

#[test]
fn a_zero_reconcile_timeout_is_refused() {
    assert_eq!(
        refusal("x", |b| b.reconcile_timeout(Duration::ZERO)),
        "controller `x` is misconfigured: `reconcile_timeout` is zero"
    );
}

#[test]
fn a_zero_sync_timeout_is_refused() {
    assert_eq!(
        refusal("x", |b| b.sync_timeout(Duration::ZERO)),
        "controller `x` is misconfigured: `sync_timeout` is zero"
    );
}

#[test]
fn a_zero_shutdown_grace_is_refused() {
    assert_eq!(
        refusal("x", |b| b.shutdown_grace(Duration::ZERO)),
        "controller `x` is misconfigured: `shutdown_grace` is zero"
    );
}

#[test]
fn a_concurrency_that_would_exhaust_memory_is_refused() {
    assert_eq!(
        refusal("x", |b| b.concurrency(std::num::NonZeroUsize::MAX)),
        "controller `x` is misconfigured: `concurrency` is above its maximum of 65536"
    );
    let informer = Informer::builder(MemoryStore::<Set>::new("sets"))
        .build()
        .expect("valid");
    let most = std::num::NonZeroUsize::new(65_536).expect("non-zero");
    Controller::builder("x", &informer, Arc::new(Probe::default()))
        .concurrency(most)
        .build()
        .expect("65536 workers are allowed");
}

#[tokio::test(start_paused = true)]
async fn duration_max_for_every_knob_means_never_and_shutdown_still_waits_for_reconciles() {
    let mut world = World::new(None);
    let probe = Arc::new(Probe {
        work: Duration::from_secs(60),
        ..Probe::default()
    });
    world.spawn(
        Controller::builder("sets", &world.set_informer, Arc::clone(&probe))
            .resync(Duration::MAX)
            .reconcile_timeout(Duration::MAX)
            .sync_timeout(Duration::MAX)
            .shutdown_grace(Duration::MAX)
            .build()
            .expect("valid"),
    );
    world.create_set("a", 1).await;
    world
        .until("a reconciled", |_| !probe.runs_of("a").is_empty())
        .await;
    // Shutdown waits out the 60 s reconcile: no timeout, an endless grace.
    let start = Instant::now();
    world.shut_down().await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(59) && waited <= Duration::from_secs(60),
        "shutdown took {waited:?}"
    );
    assert_eq!(
        probe.calls.load(Ordering::SeqCst),
        1,
        "the reconcile finished"
    );
    assert_eq!(probe.runs_of("a").len(), 1, "no resync, no timeout retry");
}

#[test]
fn group_metrics_are_bounded_and_need_groups() {
    let tenant = |key: &String| key.clone();
    let many = (0..=tend::controller::MAX_GROUP_METRICS).map(|n| n.to_string());
    assert_eq!(
        refusal("x", |b| b.group_by(tenant).group_metrics(many)),
        "controller `x` is misconfigured: `group_metrics` is above its maximum of 100"
    );
    assert_eq!(
        refusal("x", |b| b.group_metrics(["a"])),
        "controller `x` is misconfigured: `group_metrics` needs `group_by` set too"
    );
    let informer = Informer::builder(MemoryStore::<Set>::new("sets"))
        .build()
        .expect("valid");
    // The most there may be, some named twice: one series each.
    let most = (0..tend::controller::MAX_GROUP_METRICS).map(|n| n.to_string());
    Controller::builder("x", &informer, Arc::new(Probe::default()))
        .group_by(tenant)
        .group_metrics(most)
        .group_metrics(["0", "1"])
        .build()
        .expect("100 groups are allowed");
}
