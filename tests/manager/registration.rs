//! Controllers sharing informers, and registration checks.

use super::*;

#[tokio::test(start_paused = true)]
async fn two_controllers_share_one_informer_and_both_reconcile() {
    let store = widgets(&["a", "b", "c"]);
    let log = Log::default();
    let mut manager = manager().build().unwrap();
    let first = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let second = manager
        .informer("widgets", || -> Result<Informer<Widget>, _> {
            panic!("a registered informer is never built twice")
        })
        .unwrap();
    let one = manager
        .controller("one", &first, Recorder::new("one", &log))
        .build()
        .unwrap();
    let two = manager
        .controller("two", &second, Recorder::new("two", &log))
        .build()
        .unwrap();
    manager.add_controller(one).unwrap();
    manager.add_controller(two).unwrap();
    let shutdown = manager.shutdown_token();
    let run = tokio::spawn(manager.run());

    eventually("both controllers to reconcile every widget", LIMIT, || {
        ["one", "two"].iter().all(|tag| {
            ["a", "b", "c"]
                .iter()
                .all(|k| count(&log, &format!("{tag} {k}")) == 1)
        })
    })
    .await;
    let stats = store.stats();
    assert_eq!(
        (stats.lists, stats.watches),
        (1, 1),
        "one list and one watch for both controllers"
    );

    stop("run to return", &shutdown, run).await;
}

#[tokio::test]
async fn registration_rejects_duplicates_and_type_mismatches() {
    let store = widgets(&[]);
    let mut manager = manager().build().unwrap();
    let informer = manager
        .informer("widgets", || Informer::builder(store.clone()).build())
        .unwrap();
    let log = Log::default();
    let a = manager
        .controller("same", &informer, Recorder::new("a", &log))
        .build()
        .unwrap();
    let b = manager
        .controller("same", &informer, Recorder::new("b", &log))
        .build()
        .unwrap();
    manager.add_controller(a).unwrap();
    let error = manager.add_controller(b).unwrap_err();
    assert!(
        matches!(&error, ManagerError::DuplicateController { controller } if controller == "same")
    );
    assert_eq!(
        error.to_string(),
        "a controller named `same` is already registered"
    );

    #[derive(Debug, Clone)]
    struct Other(tend::Revision);
    impl tend::Object for Other {
        type Key = u32;
        fn key(&self) -> u32 {
            0
        }
        fn version(&self) -> tend::Revision {
            self.0
        }
        fn set_version(&mut self, v: tend::Revision) {
            self.0 = v;
        }
    }
    let other = MemoryStore::<Other>::new("others");
    let error = manager
        .informer("widgets", || Informer::builder(other.clone()).build())
        .unwrap_err();
    assert!(matches!(error, ManagerError::InformerType { informer } if informer == "widgets"));

    manager.add_task("t", |_| async { Ok(()) }).unwrap();
    let error = manager.add_task("t", |_| async { Ok(()) }).unwrap_err();
    assert!(matches!(error, ManagerError::DuplicateTask { .. }));
}
