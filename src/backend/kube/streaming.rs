//! A list through the watch stream (the API server's WatchList,
//! `sendInitialEvents`): the objects come one event at a time, then a
//! bookmark names the snapshot's revision, so neither the server nor the
//! client holds a page of objects at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use kube::api::{WatchEvent, WatchParams};

use super::endpoint::{Endpoint, KubeResource};
use super::object::{parse_revision, revision_of};
use super::source::{Transform, compact};
use crate::source::{Snapshot, SourceError};

/// The annotation of the bookmark that ends the initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How a [`KubeSource`](super::KubeSource) lists.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::kube::{KubeSource, ListMode};
///
/// # async fn run(client: kube::Client) {
/// let source = KubeSource::<ConfigMap>::all(client).list_mode(ListMode::Paged);
/// # drop(source); }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListMode {
    /// Through the watch stream (`sendInitialEvents`, Kubernetes 1.27 on,
    /// on by default from 1.32): one consistent snapshot at the revision
    /// of the bookmark that ends it, streamed object by object. Where the
    /// server refuses it (an older server, the `WatchList` feature gate
    /// off) or ignores it, the list is made in pages instead, and so is
    /// every later list of the source and its clones.
    #[default]
    Streaming,
    /// In pages of [`page_size`](super::KubeSource::page_size) objects of
    /// one consistent snapshot.
    Paged,
}

/// Whether a source still streams its lists: shared by its clones, so a
/// server found not to stream is asked once.
#[derive(Debug, Clone)]
pub(super) struct Streaming {
    mode: ListMode,
    refused: Arc<AtomicBool>,
}

impl Streaming {
    pub(super) fn new(mode: ListMode) -> Self {
        Self {
            mode,
            refused: Arc::new(AtomicBool::new(false)),
        }
    }

    pub(super) fn mode(&self) -> ListMode {
        self.mode
    }

    /// Whether the next list streams.
    pub(super) fn wanted(&self) -> bool {
        self.mode == ListMode::Streaming && !self.refused.load(Ordering::Relaxed)
    }

    /// One list through the watch stream; `Ok(None)` when the server
    /// cannot stream it (remembered: later lists are paged) or this stream
    /// did not finish (this list is paged).
    pub(super) async fn list<K: KubeResource>(
        &self,
        endpoint: &Endpoint<K>,
        params: WatchParams,
        idle: std::time::Duration,
        transform: &Transform<'_, K>,
    ) -> Result<Option<Snapshot<K>>, SourceError>
    where
        K::DynamicType: Clone + Send + Sync,
    {
        // No resourceVersion: a consistent read, as a list's.
        let events = match endpoint.watch(&params.initial_events(), "").await {
            Err(error) if refused(&error) => return Ok(self.refuse(&error)),
            result => result.map_err(SourceError::unavailable)?,
        };
        match initial_events(events, idle, transform).await? {
            Initial::Snapshot(snapshot) => Ok(Some(snapshot)),
            Initial::Refused(why) => Ok(self.refuse(&why)),
            Initial::Unfinished(why) => {
                tracing::info!(reason = %why, "the streaming list did not finish: listing in pages");
                Ok(None)
            }
        }
    }

    fn refuse<T>(&self, why: &dyn std::fmt::Display) -> Option<T> {
        tracing::info!(reason = %why, "the API server does not stream lists: listing in pages");
        self.refused.store(true, Ordering::Relaxed);
        None
    }
}

/// What the start of a streaming watch gave.
enum Initial<K> {
    Snapshot(Snapshot<K>),
    /// The server did not stream (it ignored `sendInitialEvents` or
    /// refused it in the stream), for this reason.
    Refused(String),
    /// The stream ended or went silent before its initial events did (a
    /// list longer than the watch's timeout, a server that neither
    /// streams nor sends bookmarks): this list is made in pages.
    Unfinished(String),
}

/// The objects of `events` up to the bookmark that ends the initial
/// events; failing after `idle` without an event.
async fn initial_events<K: KubeResource>(
    events: impl Stream<Item = kube::Result<WatchEvent<K>>>,
    idle: std::time::Duration,
    transform: &Transform<'_, K>,
) -> Result<Initial<K>, SourceError> {
    let mut events = std::pin::pin!(events);
    let mut objects = Vec::new();
    loop {
        let event = match tokio::time::timeout(idle, events.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => {
                let ended = "the watch ended before its initial events did";
                return Ok(Initial::Unfinished(ended.into()));
            }
            Err(_) => {
                let silent = format!("the streaming list sent nothing for {idle:?}");
                return Ok(Initial::Unfinished(silent));
            }
        };
        match event {
            Ok(WatchEvent::Added(object)) => {
                revision_of(&object).map_err(SourceError::unavailable)?;
                objects.push(compact(transform(object)));
            }
            Ok(WatchEvent::Bookmark(bookmark)) => {
                let end = bookmark.metadata.annotations.get(INITIAL_EVENTS_END);
                if end.map(String::as_str) != Some("true") {
                    // A server that ignores `sendInitialEvents` sends
                    // bookmarks that end nothing.
                    return Ok(Initial::Refused(
                        "a bookmark before the initial events' end".into(),
                    ));
                }
                let revision = parse_revision(&bookmark.metadata.resource_version)
                    .map_err(SourceError::unavailable)?;
                return Ok(Initial::Snapshot(Snapshot { objects, revision }));
            }
            Ok(WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => {
                return Ok(Initial::Refused(
                    "a change before the initial events' end".into(),
                ));
            }
            Ok(WatchEvent::Error(status)) => {
                let error = kube::Error::Api(status);
                if refused(&error) {
                    return Ok(Initial::Refused(error.to_string()));
                }
                return Err(SourceError::unavailable(error));
            }
            Err(error) => return Err(SourceError::unavailable(error)),
        }
    }
}

/// Whether the server refused the request as one it does not take, rather
/// than failing to serve it (see [`refusal`]).
fn refused(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => refusal(status.code, &status.message),
        _ => false,
    }
}

/// `400`, `422` (`sendInitialEvents` with the `WatchList` feature gate
/// off), `501`, or the `500` of a server whose etcd cannot stream ("the
/// required storage feature RequestWatchProgress is disabled": etcd older
/// than 3.4.31 or 3.5.13). Not any other `500`, which may pass.
fn refusal(code: u16, message: &str) -> bool {
    match code {
        400 | 422 | 501 => true,
        500 => message.contains("RequestWatchProgress"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::watch::{Bookmark, BookmarkMeta};
    use kube::core::{ObjectMeta, Status, TypeMeta};

    use super::*;
    use crate::Revision;

    fn map(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn bookmark(version: &str, end: bool) -> WatchEvent<ConfigMap> {
        let annotations = if end {
            [(INITIAL_EVENTS_END.to_owned(), "true".to_owned())].into()
        } else {
            Default::default()
        };
        WatchEvent::Bookmark(Bookmark {
            types: TypeMeta::default(),
            metadata: BookmarkMeta {
                resource_version: version.into(),
                annotations,
            },
        })
    }

    async fn initial(
        events: Vec<kube::Result<WatchEvent<ConfigMap>>>,
    ) -> Result<Initial<ConfigMap>, SourceError> {
        initial_events(
            futures::stream::iter(events),
            Duration::from_secs(1),
            &|m| m,
        )
        .await
    }

    #[tokio::test]
    async fn the_initial_events_up_to_the_end_bookmark_are_the_snapshot() {
        let events = vec![
            Ok(WatchEvent::Added(map("a", "3"))),
            Ok(WatchEvent::Added(map("b", "5"))),
            Ok(bookmark("9", true)),
            Ok(WatchEvent::Added(map("c", "10"))),
        ];
        let Ok(Initial::Snapshot(snapshot)) = initial(events).await else {
            panic!("a snapshot");
        };
        assert_eq!(snapshot.revision, Revision::new(9));
        let names: Vec<_> = snapshot
            .objects
            .iter()
            .map(|m| m.metadata.name.clone())
            .collect();
        assert_eq!(names, [Some("a".into()), Some("b".into())]);
    }

    #[tokio::test]
    async fn a_server_that_ignores_initial_events_is_found_out() {
        let plain_bookmark = vec![
            Ok(WatchEvent::Added(map("a", "3"))),
            Ok(bookmark("9", false)),
        ];
        assert!(matches!(
            initial(plain_bookmark).await,
            Ok(Initial::Refused(_))
        ));
        let change = vec![Ok(WatchEvent::Modified(map("a", "4")))];
        assert!(matches!(initial(change).await, Ok(Initial::Refused(_))));
        let mut invalid = Status::failure("sendInitialEvents is forbidden", "Invalid");
        invalid.code = 422;
        let in_stream = vec![Ok(WatchEvent::Error(Box::new(invalid)))];
        assert!(matches!(initial(in_stream).await, Ok(Initial::Refused(_))));
    }

    #[tokio::test]
    async fn a_stream_that_fails_is_unavailable_and_one_that_ends_early_unfinished() {
        let mut busy = Status::failure("busy", "ServiceUnavailable");
        busy.code = 503;
        let failed = vec![Ok(WatchEvent::Error(Box::new(busy)))];
        assert!(matches!(
            initial(failed).await,
            Err(SourceError::Unavailable(_))
        ));
        let ended = vec![Ok(WatchEvent::Added(map("a", "3")))];
        assert!(matches!(initial(ended).await, Ok(Initial::Unfinished(_))));
        let bad_revision = vec![Ok(WatchEvent::Added(map("a", "x")))];
        assert!(matches!(
            initial(bad_revision).await,
            Err(SourceError::Unavailable(_))
        ));
        let bad_end = vec![Ok(bookmark("x", true))];
        assert!(matches!(
            initial(bad_end).await,
            Err(SourceError::Unavailable(_))
        ));
    }

    #[test]
    fn only_requests_the_server_does_not_take_are_refusals() {
        assert!(refusal(422, "sendInitialEvents is forbidden"));
        assert!(refusal(400, "") && refusal(501, ""));
        let old_etcd = "a watch stream was requested by the client but the required \
                        storage feature RequestWatchProgress is disabled";
        assert!(refusal(500, old_etcd));
        assert!(!refusal(500, "etcdserver: request timed out"), "may pass");
        assert!(!refusal(503, "") && !refusal(429, "") && !refusal(403, ""));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_streaming_list_is_unfinished_after_the_idle_bound() {
        let silent = futures::stream::pending::<kube::Result<WatchEvent<ConfigMap>>>();
        let started = tokio::time::Instant::now();
        let result = initial_events(silent, Duration::from_secs(7), &|m| m).await;
        assert!(matches!(result, Ok(Initial::Unfinished(_))));
        assert_eq!(started.elapsed(), Duration::from_secs(7));
    }
}
