//! Timeouts and stall bounds: refused, accepted, unlimited.

use super::*;

#[test]
fn zero_timeouts_and_stall_bounds_are_refused_and_huge_ones_accepted() {
    let refused = |builder: tend::manager::ManagerBuilder| match builder.build() {
        Err(ManagerError::InvalidConfig { setting, error }) => {
            assert_eq!(error, SettingError::Zero);
            setting
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    assert_eq!(
        refused(manager().graceful_shutdown_timeout(Duration::ZERO)),
        ManagerSetting::GracefulShutdownTimeout
    );
    assert_eq!(
        refused(manager().sync_timeout(Duration::ZERO)),
        ManagerSetting::SyncTimeout
    );
    assert_eq!(
        refused(manager().stuck_key_after(Duration::ZERO)),
        ManagerSetting::StuckKeyAfter
    );
    let error = manager()
        .stalled_informer_after(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "manager is misconfigured: `stalled_informer_after` is zero"
    );
    manager()
        .stuck_key_after(Duration::MAX)
        .stuck_key_after_timeouts(std::num::NonZeroU32::MAX)
        .stalled_informer_after(Duration::MAX)
        .build()
        .expect("huge bounds mean never");
    manager()
        .without_stall_checks()
        .build()
        .expect("checks off");
}

#[tokio::test(start_paused = true)]
async fn duration_max_timeouts_mean_no_limit() {
    let store = widgets(&["a"]);
    let log = Log::default();
    let mut manager = manager()
        .graceful_shutdown_timeout(Duration::MAX)
        .sync_timeout(Duration::MAX)
        .build()
        .unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let controller = manager
        .controller("widgets", &informer, Recorder::new("r", &log))
        .build()
        .unwrap();
    manager.add_controller(controller).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());
    eventually("the widget reconciled", LIMIT, || count(&log, "r a") == 1).await;
    stop("run to return", &shutdown, run).await;
}
