//! `KubeSource`: a [`Source`] over one resource type of an API server.

use std::fmt;
use std::num::NonZeroU32;

use async_trait::async_trait;
use futures::StreamExt;
use kube::Client;
use kube::api::{ListParams, WatchEvent, WatchParams};

use super::endpoint::{Endpoint, KubeResource, status_code};
use super::object::{key_of, parse_revision, revision_of};
use super::shard_label::ShardLabel;
use super::streaming::{ListMode, Streaming};
use crate::client::Fences;
use crate::informer::CacheScope;
use crate::object::{ObjectKey, Revision};
use crate::source::{Change, Snapshot, Source, SourceError, WatchStream};

/// What a list passes each object through as it arrives.
pub(super) type Transform<'a, K> = dyn Fn(K) -> K + Send + Sync + 'a;

/// Objects per list page, by default (client-go's informers use 500).
const DEFAULT_PAGE_SIZE: u32 = 500;

/// How long the server keeps one watch open before it ends it; the
/// informer then watches again from its revision (client-go picks 5–10
/// minutes at random; a fixed bound is as good when bookmarks flow).
const WATCH_TIMEOUT_SECS: u32 = 290;

/// How often a paginated list starts over because its continue token
/// expired (the pages' snapshot was compacted) before it gives up.
const LIST_RESTARTS: u32 = 3;

/// A [`Source`] over one resource type of a Kubernetes API server: any
/// kube-rs resource (k8s-openapi types, `CustomResource` types), in every
/// namespace or one, with label and field selectors.
///
/// - [`list`](Source::list) reads one consistent snapshot, by default
///   through the watch stream ([`ListMode::Streaming`]: the objects one
///   event at a time, its revision the bookmark's that ends them), else,
///   or where the server does not stream, in pages
///   ([`page_size`](Self::page_size), default 500; its revision the first
///   page's `resourceVersion`; a snapshot compacted between pages starts
///   the list over).
/// - A source of `PartialObjectMeta<K>` (kube-rs's metadata-only form of
///   any resource `K`) asks the server for metadata only, in lists,
///   watches and reads: its cache holds names, labels, annotations,
///   owners and finalizers, not specs. Its [client](Self::client) writes
///   only metadata (see [`KubeSource::client`]).
/// - [`watch(R)`](Source::watch) watches from `resourceVersion` `R` with
///   bookmarks, which become [`Change::Bookmark`]s; a `410 Gone` (the
///   history before `R` is compacted, or older than the server's watch
///   cache) becomes [`SourceError::Expired`], so the informer lists again
///   and learns the deletes it missed; a lost connection or a restarting
///   server is [`SourceError::Unavailable`], so the informer backs off and
///   resumes from its revision.
/// - Revisions are `resourceVersion`s read as numbers, as an etcd-backed
///   API server gives them. One that is not a number fails the call with
///   [`SourceError::Unavailable`] caused by a
///   [`RevisionError`](super::RevisionError).
///
/// # Examples
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use tend::kube::KubeSource;
/// use tend::Informer;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let source = KubeSource::<ConfigMap>::namespaced(client, "apps")
///     .labels("app.kubernetes.io/part-of=shop");
/// let maps = Informer::builder(source).build()?;
/// # Ok(()) }
/// ```
pub struct KubeSource<K: KubeResource> {
    pub(super) endpoint: Endpoint<K>,
    name: String,
    pub(super) labels: Option<String>,
    fields: Option<String>,
    /// Only the objects labelled with the shards the scope keeps.
    pub(super) shards: Option<(ShardLabel, CacheScope<ObjectKey>)>,
    page_size: NonZeroU32,
    streaming: Streaming,
}

impl<K: KubeResource> KubeSource<K>
where
    K::DynamicType: Default + Clone + Send + Sync,
{
    /// Objects of every namespace (or of a cluster-scoped kind).
    #[must_use]
    pub fn all(client: Client) -> Self {
        Self::all_with(client, K::DynamicType::default())
    }

    /// Objects of `namespace` only.
    #[must_use]
    pub fn namespaced(client: Client, namespace: &str) -> Self {
        Self::namespaced_with(client, namespace, K::DynamicType::default())
    }
}

impl<K: KubeResource> KubeSource<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    /// Objects of every namespace, for a type whose kind is known at run
    /// time (kube-rs's `DynamicObject` with its `ApiResource`).
    #[must_use]
    pub fn all_with(client: Client, dyntype: K::DynamicType) -> Self {
        Self::scoped(Endpoint::new(client, dyntype, None))
    }

    /// Objects of `namespace`, for a type whose kind is known at run time.
    #[must_use]
    pub fn namespaced_with(client: Client, namespace: &str, dyntype: K::DynamicType) -> Self {
        Self::scoped(Endpoint::new(client, dyntype, Some(namespace.to_owned())))
    }

    fn scoped(endpoint: Endpoint<K>) -> Self {
        Self {
            name: endpoint.plural(),
            endpoint,
            labels: None,
            fields: None,
            shards: None,
            page_size: NonZeroU32::new(DEFAULT_PAGE_SIZE).expect("500 is not zero"),
            streaming: Streaming::new(ListMode::default()),
        }
    }

    /// How lists are made (default [`ListMode::Streaming`], which falls
    /// back to pages where the server does not stream).
    #[must_use]
    pub fn list_mode(mut self, mode: ListMode) -> Self {
        self.streaming = Streaming::new(mode);
        self
    }

    /// Only objects whose labels match `selector` (`app=web,tier!=db`).
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.labels = Some(selector.to_owned());
        self
    }

    /// Only objects whose fields match `selector`
    /// (`metadata.name=settings`).
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.fields = Some(selector.to_owned());
        self
    }

    /// Whether the next list goes through the watch stream: the mode is
    /// [`ListMode::Streaming`] and the server has not been found unable
    /// to stream.
    #[must_use]
    pub fn streams_lists(&self) -> bool {
        self.streaming.wanted()
    }

    /// Objects per list page (default 500), where lists are paged.
    #[must_use]
    pub fn page_size(mut self, size: NonZeroU32) -> Self {
        self.page_size = size;
        self
    }

    /// The name in logs, errors and metrics (default: the kind's plural,
    /// `configmaps`).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// A client writing to the same API server, unfenced (see the
    /// [module docs](super) on fencing).
    ///
    /// The client of a metadata-only source (`PartialObjectMeta<K>`) reads
    /// metadata; its [`update`](crate::client::Client::update) patches the
    /// labels, annotations, finalizers and owner references (on the
    /// condition of the object's `resourceVersion`, as a full update) and
    /// leaves the rest of the object as it is; its `apply` applies them;
    /// its `create` and `update_status` fail with
    /// [`ClientError::Unsupported`](crate::client::ClientError::Unsupported).
    /// A reconcile that needs the whole object reads it live through a
    /// client of `K` (`KubeSource::<K>::all(client).client().get(key)`).
    #[must_use]
    pub fn client(&self) -> crate::client::Client<K> {
        super::client::client(self.clone(), None)
    }

    /// A client whose writes, when given a fencing token, check it against
    /// `authority` (a [`KubeElection`](super::KubeElection), or any
    /// [`Fences`](crate::client::Fences)) just before they are sent. Kubernetes cannot check a
    /// token in the same transaction as the write: see the
    /// [module docs](super).
    #[must_use]
    pub fn client_fenced_by(&self, authority: &impl Fences) -> crate::client::Client<K> {
        super::client::client(self.clone(), Some(authority.fencing()))
    }

    fn list_params(&self) -> ListParams {
        let mut params = ListParams::default().limit(self.page_size.get());
        if let Some(labels) = &self.label_selector() {
            params = params.labels(labels);
        }
        if let Some(fields) = &self.fields {
            params = params.fields(fields);
        }
        params
    }

    fn watch_params(&self) -> WatchParams {
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        if let Some(labels) = &self.label_selector() {
            params = params.labels(labels);
        }
        if let Some(fields) = &self.fields {
            params = params.fields(fields);
        }
        params
    }

    /// One paginated list, each object passed through `transform` as its
    /// page arrives; `Ok(None)` when its continue token expired.
    async fn list_once(
        &self,
        transform: &Transform<'_, K>,
    ) -> Result<Option<Snapshot<K>>, SourceError> {
        let mut objects = Vec::new();
        let mut revision = None;
        let mut token: Option<String> = None;
        // One selector for every page: the server refuses a continue token
        // with other parameters.
        let first = self.list_params();
        loop {
            let mut params = first.clone();
            if let Some(token) = &token {
                params = params.continue_token(token);
            }
            let page = match self.endpoint.list(&params).await {
                Err(error) if token.is_some() && status_code(&error) == Some(410) => {
                    return Ok(None);
                }
                result => result.map_err(SourceError::unavailable)?,
            };
            if revision.is_none() {
                let version = page.metadata.resource_version.as_deref().unwrap_or("");
                revision = Some(parse_revision(version).map_err(SourceError::unavailable)?);
            }
            for object in page.items {
                revision_of(&object).map_err(SourceError::unavailable)?;
                objects.push(compact(transform(object)));
            }
            token = page.metadata.continue_.filter(|token| !token.is_empty());
            if token.is_none() {
                let revision = revision.unwrap_or(Revision::ZERO);
                return Ok(Some(Snapshot { objects, revision }));
            }
        }
    }
}

impl<K: KubeResource> KubeSource<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    /// A list through the watch stream where it streams, else in pages.
    async fn list_with(&self, transform: &Transform<'_, K>) -> Result<Snapshot<K>, SourceError> {
        if self.streaming.wanted() {
            let params = self.watch_params();
            let streamed = self
                .streaming
                .list(&self.endpoint, params, WATCH_IDLE, transform);
            if let Some(snapshot) = streamed.await? {
                return Ok(snapshot);
            }
        }
        self.list_paged(transform).await
    }

    /// A list in pages (a client's lists: they need only the `list` verb).
    pub(super) async fn list_paged(
        &self,
        transform: &Transform<'_, K>,
    ) -> Result<Snapshot<K>, SourceError> {
        for _ in 0..LIST_RESTARTS {
            if let Some(snapshot) = self.list_once(transform).await? {
                return Ok(snapshot);
            }
            tracing::debug!(source = %self.name, "list snapshot compacted between pages, listing again");
        }
        Err(SourceError::unavailable(format!(
            "the list's snapshot was compacted between pages {LIST_RESTARTS} times in a row"
        )))
    }
}

#[async_trait]
impl<K: KubeResource> Source for KubeSource<K>
where
    K::DynamicType: Clone + Send + Sync,
{
    type Object = K;

    fn name(&self) -> &str {
        &self.name
    }

    async fn list(&self) -> Result<Snapshot<K>, SourceError> {
        self.list_with(&|object| object).await
    }

    /// Each object transformed as it arrives: a page or an event at a
    /// time, never the whole list untransformed.
    async fn list_transformed(
        &self,
        transform: &(dyn Fn(K) -> K + Send + Sync),
    ) -> Result<Snapshot<K>, SourceError> {
        self.list_with(transform).await
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<K>, SourceError> {
        let version = from.get().to_string();
        let events = self
            .endpoint
            .watch(&self.watch_params(), &version)
            .await
            .map_err(|error| {
                watch_error(&error, from).unwrap_or_else(|| SourceError::unavailable(error))
            })?;
        Ok(guarded(events.boxed(), from))
    }

    /// The `resourceVersion` of a list of at most one object: the API
    /// server's newest revision (its etcd's, which every resource's writes
    /// move), compared as an integer as every revision here is. A quiet
    /// resource's cache catches up at its next bookmark (about a minute).
    async fn head(&self) -> Result<Option<Revision>, SourceError> {
        let page = self
            .endpoint
            .list(&self.list_params().limit(1))
            .await
            .map_err(SourceError::unavailable)?;
        let version = page.metadata.resource_version.as_deref().unwrap_or("");
        parse_revision(version)
            .map(Some)
            .map_err(SourceError::unavailable)
    }
}

/// `object` as a copy of exact size: what JSON decoding leaves (strings
/// and lists grown by doubling) holds about a fifth more heap than the
/// object needs, kept for as long as the cache keeps it.
#[allow(clippy::redundant_clone)] // the copy is the point: it has no slack
pub(super) fn compact<K: Clone>(object: K) -> K {
    object.clone()
}

/// How long a watch may stay silent before it is taken for a dead
/// connection: the server ends every watch after `WATCH_TIMEOUT_SECS`
/// (sending bookmarks meanwhile), so a longer silence is a half-open
/// connection that would otherwise hang the informer for ever.
const WATCH_IDLE: std::time::Duration =
    std::time::Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 30);

/// `events` as changes, failing with [`SourceError::Unavailable`] after
/// [`WATCH_IDLE`] without one.
fn guarded<K: KubeResource>(
    events: futures::stream::BoxStream<'static, kube::Result<WatchEvent<K>>>,
    from: Revision,
) -> WatchStream<K> {
    futures::stream::unfold(Some(events), move |events| async move {
        let mut events = events?;
        match tokio::time::timeout(WATCH_IDLE, events.next()).await {
            Ok(Some(event)) => Some((change(event, from), Some(events))),
            Ok(None) => None,
            Err(_) => {
                let silent = format!(
                    "the watch sent nothing for {WATCH_IDLE:?}: taken for a dead connection"
                );
                Some((Err(SourceError::unavailable(silent)), None))
            }
        }
    })
    .boxed()
}

/// A watch event as a change.
fn change<K: KubeResource>(
    event: kube::Result<WatchEvent<K>>,
    from: Revision,
) -> Result<Change<K>, SourceError> {
    let checked = |object: &K| revision_of(object).map_err(SourceError::unavailable);
    match event {
        Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
            checked(&object)?;
            Ok(Change::Applied(compact(object)))
        }
        Ok(WatchEvent::Deleted(object)) => Ok(Change::Deleted {
            revision: checked(&object)?,
            key: key_of(&object),
        }),
        Ok(WatchEvent::Bookmark(bookmark)) => parse_revision(&bookmark.metadata.resource_version)
            .map(Change::Bookmark)
            .map_err(SourceError::unavailable),
        Ok(WatchEvent::Error(status)) => {
            let error = kube::Error::Api(status);
            Err(watch_error(&error, from).unwrap_or_else(|| SourceError::unavailable(error)))
        }
        Err(error) => {
            Err(watch_error(&error, from).unwrap_or_else(|| SourceError::unavailable(error)))
        }
    }
}

/// `410 Gone` as [`SourceError::Expired`]: the server no longer has the
/// history after `from`.
fn watch_error(error: &kube::Error, from: Revision) -> Option<SourceError> {
    let kube::Error::Api(status) = error else {
        return None;
    };
    (status.code == 410).then(|| SourceError::expired(from, compacted(&status.message, from)))
}

/// The oldest revision the server still has, from a `410` message such as
/// "too old resource version: 12 (345)"; `from` when it says none.
fn compacted(message: &str, from: Revision) -> Revision {
    let inner = message
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(number, _)| parse_revision(number).ok());
    inner.unwrap_or(from)
}

impl<K: KubeResource> Clone for KubeSource<K>
where
    K::DynamicType: Clone,
{
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
            name: self.name.clone(),
            labels: self.labels.clone(),
            fields: self.fields.clone(),
            shards: self.shards.clone(),
            page_size: self.page_size,
            streaming: self.streaming.clone(),
        }
    }
}

impl<K: KubeResource> fmt::Debug for KubeSource<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSource")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .field("fields", &self.fields)
            .field(
                "shard_label",
                &self.shards.as_ref().map(|(label, _)| label.key()),
            )
            .field("page_size", &self.page_size)
            .field("list_mode", &self.streaming.mode())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_is_taken_for_a_dead_connection() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let silent = futures::stream::pending::<kube::Result<WatchEvent<ConfigMap>>>().boxed();
        let mut changes = guarded(silent, Revision::new(5));
        let started = tokio::time::Instant::now();
        let first = changes.next().await;
        assert!(
            matches!(first, Some(Err(SourceError::Unavailable(_)))),
            "{first:?}"
        );
        assert_eq!(started.elapsed(), WATCH_IDLE);
        assert!(
            changes.next().await.is_none(),
            "the stream ends after its failure"
        );
    }

    #[test]
    fn a_compacted_object_keeps_no_slack_from_decoding() {
        use k8s_openapi::api::core::v1::Pod;
        let containers: Vec<_> = (0..5)
            .map(|i| serde_json::json!({ "name": format!("c{i}") }))
            .collect();
        let json = serde_json::json!({ "spec": { "containers": containers } });
        // From text, as from the API server: a list's length is unknown
        // until its end.
        let decoded: Pod = serde_json::from_str(&json.to_string()).expect("a pod");
        let slack = |pod: &Pod| {
            let containers = &pod.spec.as_ref().expect("a spec").containers;
            containers.capacity() - containers.len()
        };
        assert!(slack(&decoded) > 0, "decoding grows lists by doubling");
        let expected = decoded.clone();
        let compacted = compact(decoded);
        assert_eq!(slack(&compacted), 0);
        assert_eq!(compacted, expected);
    }

    #[test]
    fn the_oldest_revision_is_read_from_a_gone_message() {
        let from = Revision::new(12);
        assert_eq!(
            compacted("too old resource version: 12 (345)", from),
            Revision::new(345)
        );
        assert_eq!(compacted("resource version too old", from), from);
        assert_eq!(compacted("too old (abc)", from), from);
    }
}
