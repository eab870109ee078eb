//! The etcd source against a real etcd on loopback: list, watch, deletes,
//! pagination, compaction, restarts and malformed data.

#![cfg(feature = "etcd")]

#[path = "support/etcd.rs"]
mod support;

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use futures::StreamExt;
use tend::etcd::etcd_client::{CompactionOptions, Txn, TxnOp};
use tend::etcd::{DecodeError, EtcdSource};
use tend::{Change, Revision, Source, SourceError};

use support::{
    Item, PREFIX, cached, client, eventually, json, run_informer, server, source, through_proxy,
    within,
};

const LIMIT: Duration = Duration::from_secs(10);

fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_lists_watches_and_deletes() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    kv.put(key("a"), json("a", 1), None).await.unwrap();
    kv.put(key("b"), json("b", 2), None).await.unwrap();
    kv.put("/test/other", "not ours", None).await.unwrap();
    let source = source(kv.clone());
    let snapshot = source.list().await.unwrap();
    assert_eq!(snapshot.objects.len(), 2);
    let a = snapshot.objects.iter().find(|i| i.name == "a").unwrap();
    assert!(a.version > Revision::ZERO && a.version <= snapshot.revision);

    let running = run_informer(source.clone()).await;
    assert_eq!(
        cached(&running.informer),
        [("a".into(), 1), ("b".into(), 2)]
    );
    kv.put(key("c"), json("c", 3), None).await.unwrap();
    kv.put(key("a"), json("a", 10), None).await.unwrap();
    kv.delete(key("b"), None).await.unwrap();
    eventually("the watch to deliver put, update and delete", LIMIT, || {
        cached(&running.informer) == [("a".into(), 10), ("c".into(), 3)]
    })
    .await;
    let cached_a = running.informer.cache().get(&"a".to_owned()).unwrap();
    let stored = kv.get(key("a"), None).await.unwrap();
    assert_eq!(
        cached_a.version.get(),
        stored.kvs()[0].mod_revision() as u64,
        "version is the mod revision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_bookmarks_from_progress_notifications() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    let source = source(kv.clone());
    let start = source.list().await.unwrap().revision;
    let mut stream = source.watch(start).await.unwrap();
    kv.put("/test/elsewhere", "x", None).await.unwrap();
    let bookmark = within("a bookmark", LIMIT, async {
        loop {
            match stream.next().await {
                Some(Ok(Change::Bookmark(at))) => break at,
                Some(Ok(_)) => {}
                other => panic!("unexpected end of watch: {other:?}"),
            }
        }
    })
    .await;
    assert!(bookmark > start, "a bookmark moves past writes elsewhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_is_the_header_revision_and_the_informer_catches_up_with_it() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    kv.put(key("a"), json("a", 1), None).await.unwrap();
    let source = source(kv.clone());
    // Writes outside the prefix move etcd's revision, hence the head.
    let outside = kv.put("/test/other", "not ours", None).await.unwrap();
    let written = outside.header().expect("a header").revision() as u64;
    let head = source.head().await.unwrap().expect("etcd tells its head");
    assert_eq!(head, Revision::new(written));

    let running = run_informer(source.clone()).await;
    kv.put(key("b"), json("b", 2), None).await.unwrap();
    eventually("a probe, and the cache at the head", LIMIT, || {
        running
            .informer
            .lag()
            .is_some_and(|lag| lag.revisions == 0 && lag.head >= head)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_through_more_keys_than_one_page() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    for batch in 0..5 {
        let ops: Vec<_> = (0..50)
            .map(|i| {
                let name = format!("item-{:04}", batch * 50 + i);
                TxnOp::put(key(&name), json(&name, i), None)
            })
            .collect();
        kv.txn(Txn::new().and_then(ops)).await.unwrap();
    }
    let source = EtcdSource::<Item>::builder("items", kv.clone(), PREFIX)
        .page_size(NonZeroU32::new(7).unwrap())
        .build();
    // A write between pages must not show up: every page is pinned.
    let snapshot = source.list().await.unwrap();
    assert_eq!(snapshot.objects.len(), 250);
    let mut names: Vec<_> = snapshot.objects.iter().map(|i| i.name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 250, "no key twice across pages");
    assert!(
        snapshot
            .objects
            .iter()
            .all(|i| i.version <= snapshot.revision)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_compacted_revision_is_expired() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    kv.put(key("a"), json("a", 1), None).await.unwrap();
    let old = source(kv.clone()).list().await.unwrap().revision;
    kv.put(key("a"), json("a", 2), None).await.unwrap();
    let now = kv.put(key("a"), json("a", 3), None).await.unwrap();
    let rev = now.header().unwrap().revision();
    kv.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    let mut stream = source(kv.clone()).watch(old).await.unwrap();
    let first = within("the compacted watch to answer", LIMIT, stream.next()).await;
    match first {
        Some(Err(SourceError::Expired { requested, .. })) => assert_eq!(requested, old),
        other => panic!("expected expired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_cut_off_ends_with_the_missed_deletes() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    for name in ["a", "b", "c"] {
        kv.put(key(name), json(name, 1), None).await.unwrap();
    }
    let (proxy, through) = through_proxy(&etcd).await;
    let running = run_informer(source(through)).await;
    // Cut the informer off, delete and compact meanwhile.
    proxy.blackhole(true);
    kv.delete(key("b"), None).await.unwrap();
    kv.put(key("d"), json("d", 4), None).await.unwrap();
    let rev = kv.put(key("c"), json("c", 3), None).await.unwrap();
    kv.compact(rev.header().unwrap().revision(), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.blackhole(false);
    // Which way it gets there depends on timing, and each is correct: the
    // watch that was cut off may live through it (etcd had sent the changes
    // before compacting; the proxy held them), or end and resume after the
    // compaction once the held changes arrived, or resume from before it
    // and list again. The cache ends with b gone either way.
    eventually(
        "the cache to drop b and add d",
        Duration::from_secs(20),
        || cached(&running.informer) == [("a".into(), 1), ("c".into(), 3), ("d".into(), 4)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_mid_watch_relists_with_the_missed_deletes() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    for name in ["a", "b", "c"] {
        kv.put(key(name), json(name, 1), None).await.unwrap();
    }
    let source = source(kv.clone());
    let start = source.list().await.unwrap().revision;
    // The watch falls behind (it is not polled) while keys are deleted and
    // the history compacted: etcd cancels it with a compact revision.
    let mut stream = source.watch(start).await.unwrap();
    kv.delete(key("b"), None).await.unwrap();
    let rev = kv.put(key("a"), json("a", 2), None).await.unwrap();
    kv.compact(rev.header().unwrap().revision(), None)
        .await
        .unwrap();
    let mut expired = false;
    let mut seen = Vec::new();
    within("the watch to report or deliver", LIMIT, async {
        while let Some(item) = stream.next().await {
            match item {
                Err(error) => {
                    expired = error.is_expired();
                    break;
                }
                Ok(change) => seen.push(change.revision()),
            }
            if seen.len() == 2 {
                break;
            }
        }
    })
    .await;
    // Either etcd still delivered both changes (it had them buffered) or
    // the watch expired; both are correct. With an informer, the relist
    // brings the same state.
    assert!(
        expired || seen.len() == 2,
        "expired: {expired}, seen: {seen:?}"
    );
    let running = run_informer(source.clone()).await;
    assert_eq!(
        cached(&running.informer),
        [("a".into(), 2), ("c".into(), 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_mid_watch_resumes_without_relisting() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    kv.put(key("a"), json("a", 1), None).await.unwrap();
    let running = run_informer(source(etcd.client().await.unwrap())).await;
    let lists = running.informer.stats().lists;
    etcd.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    etcd.restart().await.unwrap();
    let mut kv = client(&etcd).await;
    kv.put(key("b"), json("b", 2), None).await.unwrap();
    kv.delete(key("a"), None).await.unwrap();
    eventually(
        "the informer to resume after the restart",
        Duration::from_secs(15),
        || cached(&running.informer) == [("b".into(), 2)],
    )
    .await;
    let stats = running.informer.stats();
    assert_eq!(stats.lists, lists, "resumed from its revision, no relist");
    assert!(stats.watch_restarts > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_values_are_skipped_counted_and_picked_up_once_fixed() {
    let etcd = server().await;
    let mut kv = client(&etcd).await;
    put_one_good_and_five_malformed_values(&mut kv).await;
    let source = EtcdSource::<Item>::builder("items", kv.clone(), PREFIX)
        .max_value_bytes(NonZeroUsize::new(1024).unwrap())
        .build();
    let running = run_informer(source.clone()).await;
    assert_eq!(cached(&running.informer), [("good".into(), 1)]);
    assert_eq!(source.decode_errors(), 5);
    assert_skipped_one_of_each_malformation(&source);

    // A bad write on the watch: the object is absent, the informer lives.
    kv.put(key("good"), "[]", None).await.unwrap();
    kv.put(key("after"), json("after", 2), None).await.unwrap();
    eventually("the bad update to drop the object", LIMIT, || {
        cached(&running.informer) == [("after".into(), 2)]
    })
    .await;
    // Fixed values are picked up.
    kv.put(key("garbage"), json("garbage", 3), None)
        .await
        .unwrap();
    kv.put(key("good"), json("good", 4), None).await.unwrap();
    eventually("the fixed entries to appear", LIMIT, || {
        cached(&running.informer)
            == [
                ("after".into(), 2),
                ("garbage".into(), 3),
                ("good".into(), 4),
            ]
    })
    .await;
    assert_eq!(source.decode_errors(), 6);
    assert_eq!(source.skipped().len(), 4);
}

/// `good`, then five values the source must skip: garbage, the wrong shape,
/// too large, under another object's key, under a key that is not UTF-8.
async fn put_one_good_and_five_malformed_values(kv: &mut tend::etcd::etcd_client::Client) {
    kv.put(key("good"), json("good", 1), None).await.unwrap();
    kv.put(key("garbage"), "{not json", None).await.unwrap();
    kv.put(key("shape"), r#"{"name":"shape","value":"seven"}"#, None)
        .await
        .unwrap();
    kv.put(key("huge"), json("huge", 1) + &" ".repeat(4096), None)
        .await
        .unwrap();
    kv.put(key("liar"), json("someone-else", 1), None)
        .await
        .unwrap();
    let mut bad_key = PREFIX.as_bytes().to_vec();
    bad_key.extend([0xff, 0xfe]);
    kv.put(bad_key, json("x", 1), None).await.unwrap();
}

/// The skipped values: a bad key, one too large, a key mismatch, two bad
/// values.
fn assert_skipped_one_of_each_malformation(source: &EtcdSource<Item>) {
    let mut skipped: Vec<_> = source.skipped().into_iter().map(|s| s.error).collect();
    skipped.sort_by_key(|e| e.to_string());
    assert!(
        skipped
            .iter()
            .any(|e| matches!(**e, DecodeError::KeyNotUtf8))
    );
    assert!(
        skipped
            .iter()
            .any(|e| matches!(**e, DecodeError::TooLarge { .. }))
    );
    assert!(
        skipped
            .iter()
            .any(|e| matches!(**e, DecodeError::KeyMismatch { .. }))
    );
    assert_eq!(
        skipped
            .iter()
            .filter(|e| matches!(***e, DecodeError::Value(_)))
            .count(),
        2
    );
}
