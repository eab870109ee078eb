//! The live set: the members' prefix listed, then watched from the list's
//! revision; listed again after a compaction or a failure.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use super::EtcdMembership;
use crate::shard::MemberId;

impl EtcdMembership {
    /// Starts following the live set, once, if in a tokio runtime.
    pub(super) fn start_watcher(&self) {
        let mut watcher = self.inner.watcher.lock();
        if watcher.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = &self.inner;
        let task = runtime.spawn(follow_members(
            inner.client.clone(),
            format!("{}members/", inner.root),
            inner.config.renew_deadline(),
            inner.config.retry_period(),
            Arc::clone(&inner.members),
        ));
        *watcher = Some(AbortOnDropHandle::new(task));
    }
}

/// Publishes the live set under `prefix` to `view`, listing again after
/// every end of the watch; waits `retry` after a failure.
async fn follow_members(
    client: Client,
    prefix: String,
    timeout: Duration,
    retry: Duration,
    view: Arc<watch::Sender<Vec<MemberId>>>,
) {
    loop {
        match follow_once(&client, &prefix, timeout, &view).await {
            Ok(()) => tracing::debug!(%prefix, "the members' watch ended, listing again"),
            Err(error) => {
                tracing::debug!(%error, %prefix, "following the members failed, retrying");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// One list, then its watch until it ends or is cancelled (compacted).
async fn follow_once(
    client: &Client,
    prefix: &str,
    timeout: Duration,
    view: &watch::Sender<Vec<MemberId>>,
) -> Result<(), etcd_client::Error> {
    let timed_out = || {
        etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "etcd request timed out",
        ))
    };
    let options = GetOptions::new().with_prefix().with_keys_only();
    let mut kv = client.kv_client();
    let list = kv.get(prefix, Some(options));
    let listed = tokio::time::timeout(timeout, list)
        .await
        .map_err(|_| timed_out())??;
    let revision = listed
        .header()
        .map_or(0, etcd_client::ResponseHeader::revision);
    let mut live: BTreeSet<MemberId> = listed
        .kvs()
        .iter()
        .filter_map(|kv| member_of(prefix, kv.key()))
        .collect();
    publish(view, &live);
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision + 1);
    let mut watches = client.watch_client();
    let watch = watches.watch(prefix, Some(options));
    let mut stream = tokio::time::timeout(timeout, watch)
        .await
        .map_err(|_| timed_out())??;
    while let Some(response) = stream.message().await? {
        if response.canceled() {
            return Ok(());
        }
        for event in response.events() {
            let Some(id) = event.kv().and_then(|kv| member_of(prefix, kv.key())) else {
                continue;
            };
            match event.event_type() {
                EventType::Put => live.insert(id),
                EventType::Delete => live.remove(&id),
            };
        }
        publish(view, &live);
    }
    Ok(())
}

/// The member id of a key under `prefix`, if it is one.
fn member_of(prefix: &str, key: &[u8]) -> Option<MemberId> {
    let id = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    (!id.is_empty() && !id.contains('/')).then(|| MemberId::from(id))
}

fn publish(view: &watch::Sender<Vec<MemberId>>, live: &BTreeSet<MemberId>) {
    view.send_if_modified(|members| {
        let differs = !members.iter().eq(live.iter());
        if differs {
            *members = live.iter().cloned().collect();
        }
        differs
    });
}
