//! The directory source on a real temporary directory: OS notifications are
//! asynchronous, so these tests run on tokio's real clock and bound every
//! wait (`LIMIT`), failing with what they waited for.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tend::dir::{DirSource, FileError};
use tend::{Event, Informer, Revision, Source, Subscription};

use support::{Running, wait_until};

/// Generous: notifications and blocking reads on a busy 2-core machine.
const LIMIT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Deserialize)]
struct App {
    #[serde(default)]
    name: String,
    replicas: u32,
    #[serde(skip)]
    version: Revision,
}
tend::impl_object!(App, key: name: String, version: version);

/// Keys from file paths: `team/web.json` holds the app `team/web`.
fn by_path(dir: &Path) -> DirSource<App> {
    DirSource::new("apps", dir).with_decoder("json", |path: &Path, bytes: &[u8]| {
        let mut app: App = serde_json::from_slice(bytes)?;
        app.name = path.with_extension("").to_string_lossy().into_owned();
        Ok::<_, serde_json::Error>(app)
    })
}

fn write(dir: &Path, file: &str, replicas: u32) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!(r#"{{"replicas": {replicas}}}"#)).unwrap();
}

/// The cache as name → replicas.
fn cache(informer: &Informer<App>) -> HashMap<String, u32> {
    informer
        .cache()
        .list()
        .iter()
        .map(|app| (app.name.clone(), app.replicas))
        .collect()
}

fn version(informer: &Informer<App>, name: &str) -> Revision {
    informer.cache().get(&name.to_owned()).unwrap().version
}

async fn until_cache(informer: &Informer<App>, what: &str, want: &[(&str, u32)]) {
    let want: HashMap<String, u32> = want.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    wait_until(what, LIMIT, || cache(informer) == want).await;
}

async fn synced(source: DirSource<App>) -> (Informer<App>, Running) {
    let informer = Informer::builder(source).build().unwrap();
    let running = Running::start(&informer);
    informer.wait_synced(LIMIT).await.unwrap();
    (informer, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_modified_renamed_and_deleted_files_reach_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.json", 1);
    let (informer, running) = synced(by_path(dir.path())).await;
    until_cache(&informer, "the listed file", &[("web", 1)]).await;

    write(dir.path(), "db.json", 1);
    write(dir.path(), "team/api.json", 2);
    until_cache(
        &informer,
        "created files",
        &[("web", 1), ("db", 1), ("team/api", 2)],
    )
    .await;

    let before = version(&informer, "web");
    write(dir.path(), "web.json", 3);
    until_cache(
        &informer,
        "a modified file",
        &[("web", 3), ("db", 1), ("team/api", 2)],
    )
    .await;
    assert!(
        version(&informer, "web") > before,
        "a change gets a greater revision"
    );

    std::fs::rename(dir.path().join("db.json"), dir.path().join("cache.json")).unwrap();
    std::fs::rename(dir.path().join("team"), dir.path().join("squad")).unwrap();
    let after_renames = [("web", 3), ("cache", 1), ("squad/api", 2)];
    until_cache(&informer, "renamed file and directory", &after_renames).await;

    std::fs::remove_file(dir.path().join("web.json")).unwrap();
    std::fs::remove_dir_all(dir.path().join("squad")).unwrap();
    until_cache(&informer, "deleted file and directory", &[("cache", 1)]).await;

    // Hidden files and other extensions are not objects.
    std::fs::write(dir.path().join(".web.json.swp"), "junk").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "junk").unwrap();
    write(dir.path(), "last.json", 1);
    until_cache(&informer, "the last file", &[("cache", 1), ("last", 1)]).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_thousand_files_all_arrive_and_all_go() {
    let dir = tempfile::tempdir().unwrap();
    let (informer, running) = synced(by_path(dir.path())).await;
    let names: Vec<String> = (0..1000).map(|n| format!("app-{n:04}")).collect();
    for (n, name) in names.iter().enumerate() {
        write(
            dir.path(),
            &format!("{name}.json"),
            u32::try_from(n).unwrap(),
        );
    }
    let want: HashMap<String, u32> = names.iter().cloned().zip(0..).collect();
    wait_until("1000 files in the cache", LIMIT, || {
        cache(&informer) == want
    })
    .await;

    for name in &names {
        std::fs::remove_file(dir.path().join(format!("{name}.json"))).unwrap();
    }
    wait_until("1000 deletions", LIMIT, || informer.cache().is_empty()).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_file_is_counted_and_skipped_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.json", 1);
    write(dir.path(), "db.json", 1);
    std::fs::write(dir.path().join("api.json"), "{ not json").unwrap();
    let source = by_path(dir.path());
    let stats = source.stats_handle();
    let (informer, running) = synced(source).await;
    until_cache(&informer, "the good files", &[("web", 1), ("db", 1)]).await;
    assert_eq!(stats.stats().malformed, 1);
    assert_eq!(stats.stats().decode_errors, 1);
    let rejected = stats.malformed();
    assert!(
        matches!(&*rejected[0], FileError::Decode { path, .. } if path == Path::new("api.json")),
        "{rejected:?}"
    );

    // A good file turned bad keeps its last good state; the others work.
    std::fs::write(dir.path().join("web.json"), r#"{"replicas": "#).unwrap();
    write(dir.path(), "db.json", 2);
    until_cache(
        &informer,
        "db's edit past web's breakage",
        &[("web", 1), ("db", 2)],
    )
    .await;
    wait_until("two rejected files", LIMIT, || stats.stats().malformed == 2).await;

    write(dir.path(), "api.json", 3);
    write(dir.path(), "web.json", 4);
    until_cache(
        &informer,
        "the fixed files",
        &[("web", 4), ("db", 2), ("api", 3)],
    )
    .await;
    assert_eq!(stats.stats().malformed, 0);
    assert!(stats.malformed().is_empty());
    assert!(stats.stats().decode_errors >= 2);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_two_files_goes_to_the_first_until_it_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.json"),
        r#"{"name": "web", "replicas": 1}"#,
    )
    .unwrap();
    let source = DirSource::<App>::json("apps", dir.path());
    let stats = source.stats_handle();
    let (informer, running) = synced(source).await;
    until_cache(&informer, "a's web", &[("web", 1)]).await;

    std::fs::write(
        dir.path().join("b.json"),
        r#"{"name": "web", "replicas": 2}"#,
    )
    .unwrap();
    wait_until("b rejected", LIMIT, || stats.stats().malformed == 1).await;
    assert!(
        matches!(&*stats.malformed()[0], FileError::DuplicateKey { holder, .. } if holder == Path::new("a.json"))
    );
    assert_eq!(cache(&informer)["web"], 1);

    std::fs::remove_file(dir.path().join("a.json")).unwrap();
    until_cache(&informer, "b's web once a let go", &[("web", 2)]).await;
    assert_eq!(stats.stats().malformed, 0);
    running.stop().await;
}

/// Holds the informer (and so the watch stream) inside a handler from the
/// first applied `hold` until released.
#[derive(Clone, Default)]
struct Gate {
    state: Arc<(Mutex<(bool, bool)>, Condvar)>, // (holding, released)
}

impl Gate {
    fn subscribe(&self, informer: &Informer<App>, hold: &'static str) -> Subscription<App> {
        let gate = self.clone();
        informer.subscribe(move |event: &Event<App>| {
            if matches!(event, Event::Applied { new, .. } if new.name == hold) {
                let (lock, released) = &*gate.state;
                let mut state = lock.lock().unwrap();
                state.0 = true;
                while !state.1 {
                    state = released.wait(state).unwrap();
                }
            }
        })
    }

    fn holding(&self) -> bool {
        self.state.0.lock().unwrap().0
    }

    fn release(&self) {
        self.state.0.lock().unwrap().1 = true;
        self.state.1.notify_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_notifications_are_made_good_by_reading_the_whole_directory() {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..100 {
        write(dir.path(), &format!("old-{n}.json"), 1);
    }
    // A buffer of one notification, and a consumer held still: a burst
    // overflows it.
    let source = by_path(dir.path()).with_notification_buffer(NonZeroUsize::MIN);
    let stats = source.stats_handle();
    let informer = Informer::builder(source).build().unwrap();
    let gate = Gate::default();
    let _held = gate.subscribe(&informer, "hold");
    let running = Running::start(&informer);
    informer.wait_synced(LIMIT).await.unwrap();
    write(dir.path(), "hold.json", 1);
    wait_until("the informer held", LIMIT, || gate.holding()).await;

    let mut want = HashMap::from([("hold".to_owned(), 1)]);
    for n in 0..100 {
        std::fs::remove_file(dir.path().join(format!("old-{n}.json"))).unwrap();
        write(dir.path(), &format!("new-{n}.json"), n);
        want.insert(format!("new-{n}"), n);
    }
    wait_until("lost notifications", LIMIT, || {
        stats.stats().missed_notifications > 0
    })
    .await;
    let scans = stats.stats().full_scans;
    gate.release();
    wait_until("the cache equals the directory", LIMIT, || {
        cache(&informer) == want
    })
    .await;
    assert!(stats.stats().full_scans > scans, "{:?}", stats.stats());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_nobody_watched_are_found_by_the_relist() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.json", 1);
    write(dir.path(), "db.json", 1);
    let (informer, running) = synced(by_path(dir.path())).await;
    until_cache(&informer, "the listed files", &[("web", 1), ("db", 1)]).await;
    running.stop().await;

    // No watch runs: these notifications go nowhere.
    std::fs::remove_file(dir.path().join("db.json")).unwrap();
    write(dir.path(), "web.json", 2);
    write(dir.path(), "api.json", 1);
    let running = Running::start(&informer);
    until_cache(
        &informer,
        "the relisted directory",
        &[("web", 2), ("api", 1)],
    )
    .await;
    assert!(informer.stats().relists >= 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_an_unknown_revision_expires_and_a_missing_directory_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.json", 1);
    let source = by_path(dir.path());
    let snapshot = source.list().await.unwrap();
    assert_eq!(snapshot.revision, Revision::new(1));
    let error = source.watch(Revision::new(7)).await.err().unwrap();
    assert!(error.is_expired(), "{error}");
    assert!(source.watch(snapshot.revision).await.is_ok());

    let missing = by_path(&dir.path().join("missing"));
    let error = missing.list().await.err().unwrap();
    assert!(!error.is_expired(), "{error}");
}

/// Random and mutated bytes in the files: each file decodes as the test's
/// own decode says, or is counted malformed; listing never panics.
#[test]
fn bad_bytes_in_files_are_rejected_one_file_at_a_time() {
    use proptest::collection::vec;
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let valid = br#"{"replicas": 3, "extra": [1, {"a": null}]}"#.to_vec();
    let file = prop_oneof![
        1 => vec(any::<u8>(), 0..128),
        3 => (vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6)).prop_map(move |edits| {
            let mut bytes = valid.clone();
            for (at, byte) in edits {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            bytes
        }),
    ];
    // TEND_FUZZ_CASES as for the other bad-bytes tests, 32 files a case.
    let cases = std::env::var("TEND_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    let config = proptest::test_runner::Config {
        cases: (cases / 8).max(1),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    };
    proptest::test_runner::TestRunner::new(config)
        .run(&vec(file, 32), |files| {
            let dir = tempfile::tempdir().expect("a directory");
            for (n, bytes) in files.iter().enumerate() {
                std::fs::write(dir.path().join(format!("f{n}.json")), bytes).expect("written");
            }
            let good = files
                .iter()
                .filter(|bytes| serde_json::from_slice::<App>(bytes).is_ok())
                .count();
            let source = by_path(dir.path());
            let listed = runtime
                .block_on(source.list())
                .expect("the directory lists");
            prop_assert_eq!(listed.objects.len(), good);
            prop_assert_eq!(source.stats().malformed, files.len() - good);
            Ok(())
        })
        .expect("every file decodes or is rejected");
}
