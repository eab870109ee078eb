//! `EtcdSource`: list and watch objects stored as JSON under a key prefix.

use std::collections::HashMap;
use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, GetOptions, GetResponse, KeyValue, WatchOptions};
use parking_lot::Mutex;

use super::codec::{
    DecodeError, EncodeError, EtcdObject, KeyCodec, TextKeys, decode_value, revision,
};
use super::watch;
use super::{EtcdKey, MAX_MESSAGE_BYTES, prefix_end, range_start};
use crate::object::{Object, Revision};
use crate::source::{Snapshot, Source, SourceError};

/// Keys fetched per page of a list unless told otherwise.
pub const DEFAULT_PAGE_SIZE: NonZeroU32 = NonZeroU32::new(1000).unwrap();

/// The largest value decoded unless told otherwise (etcd's own default
/// request limit is 1.5 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: NonZeroUsize = NonZeroUsize::new(1536 * 1024).unwrap();

/// How long one etcd request (a list page, a write, opening a watch) may
/// take unless told otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Lists of a revision compacted mid-list retried before giving up.
const LIST_ATTEMPTS: u32 = 3;

/// A [`Source`] of the objects stored as JSON under a key prefix in etcd;
/// a cheap cloneable handle.
///
/// See the [module docs](super).
///
/// # Examples
///
/// Run here against a real etcd started by
/// [`EtcdServer`](crate::testing::etcd::EtcdServer):
///
/// ```
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
/// use tend::etcd::EtcdSource;
/// use tend::{CancellationToken, Informer, Revision};
///
/// #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// struct Pod { name: String, node: String, #[serde(skip)] version: Revision }
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// # async fn run(etcd: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// // `etcd`: an `etcd_client::Client::connect(["http://127.0.0.1:2379"], None).await?`
/// let pods = EtcdSource::<Pod>::builder("pods", etcd, "/demo/pods/").build();
/// assert_eq!(pods.etcd_key(&"web-1".to_owned())?, b"/demo/pods/web-1");
/// let web = Pod { name: "web-1".into(), node: "n1".into(), version: Revision::ZERO };
/// let web = pods.client().create(web).await?;
/// assert!(web.version > Revision::ZERO); // the key's etcd `mod_revision`
///
/// let informer = Informer::builder(pods.clone()).build()?; // lists and watches the prefix
/// let stop = CancellationToken::new();
/// let watching = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// informer.wait_synced(Duration::from_secs(10)).await?;
/// assert_eq!(informer.cache().get(&"web-1".to_owned()).as_deref(), Some(&web));
/// stop.cancel();
/// watching.await??;
/// # Ok(()) }
/// # #[tokio::main] async fn main() {
/// #     let server = tend::testing::etcd::EtcdServer::start().await.unwrap();
/// #     run(server.client().await.unwrap()).await.unwrap();
/// # }
/// ```
pub struct EtcdSource<O: Object> {
    pub(super) shared: Arc<Shared<O>>,
}

/// The configuration and counters shared by a source, its watch streams
/// and its clients.
pub(super) struct Shared<O: Object> {
    pub(super) name: Arc<str>,
    pub(super) client: Client,
    pub(super) prefix: Vec<u8>,
    pub(super) codec: Arc<dyn KeyCodec<O::Key>>,
    page_size: NonZeroU32,
    pub(super) max_value_bytes: usize,
    pub(super) request_timeout: Duration,
    decode_errors: AtomicU64,
    /// Entries skipped now, by etcd key, with why.
    skipped: Mutex<HashMap<Vec<u8>, Arc<DecodeError>>>,
}

/// A stored entry the source skips: its etcd key and why.
#[derive(Debug, Clone)]
pub struct SkippedEntry {
    /// The full etcd key (prefix included).
    pub key: Vec<u8>,
    /// Why it could not be decoded.
    pub error: Arc<DecodeError>,
}

/// Configures an [`EtcdSource`]; from [`EtcdSource::builder`].
///
/// # Examples
///
/// Run here against a real etcd started by
/// [`EtcdServer`](crate::testing::etcd::EtcdServer):
///
/// ```
/// use std::num::{NonZeroU32, NonZeroUsize};
/// use std::time::Duration;
/// use tend::etcd::EtcdSource;
/// use tend::ObjectKey;
/// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// # struct Pod { key: ObjectKey, #[serde(skip)] version: tend::Revision }
/// # tend::impl_object!(Pod, key: key: ObjectKey, version: version);
///
/// # async fn run(etcd: etcd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let pods = EtcdSource::<Pod>::builder("pods", etcd, "/registry/pods/")
///     .page_size(NonZeroU32::new(500).unwrap()) // keys per list request
///     .max_value_bytes(NonZeroUsize::new(512 * 1024).unwrap()) // larger ones are skipped
///     .request_timeout(Duration::from_secs(5))
///     .build();
/// // `ObjectKey`s are stored as `{prefix}{namespace}/{name}`:
/// assert_eq!(pods.etcd_key(&ObjectKey::new("shop", "web-1"))?, b"/registry/pods/shop/web-1");
/// assert!(pods.client().get(&ObjectKey::new("shop", "web-1")).await?.is_none()); // a live read
/// # Ok(()) }
/// # #[tokio::main] async fn main() {
/// #     let server = tend::testing::etcd::EtcdServer::start().await.unwrap();
/// #     run(server.client().await.unwrap()).await.unwrap();
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct EtcdSourceBuilder<O: Object> {
    name: Arc<str>,
    client: Client,
    prefix: Vec<u8>,
    codec: Arc<dyn KeyCodec<O::Key>>,
    page_size: NonZeroU32,
    max_value_bytes: NonZeroUsize,
    request_timeout: Duration,
}

impl<O: Object> Clone for EtcdSource<O> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<O: Object> fmt::Debug for EtcdSource<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSource")
            .field("name", &self.shared.name)
            .field("prefix", &String::from_utf8_lossy(&self.shared.prefix))
            .field("codec", &self.shared.codec)
            .finish_non_exhaustive()
    }
}

impl<O: Object> fmt::Debug for EtcdSourceBuilder<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSourceBuilder")
            .field("name", &self.name)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

impl<O> EtcdSource<O>
where
    O: EtcdObject,
{
    /// Starts configuring a source named `name` over the keys that start
    /// with `prefix` (e.g. `"/registry/pods/"`), read through `client`,
    /// with the default key codec [`TextKeys`].
    pub fn builder(
        name: impl Into<Arc<str>>,
        client: Client,
        prefix: impl Into<Vec<u8>>,
    ) -> EtcdSourceBuilder<O>
    where
        O::Key: EtcdKey,
    {
        Self::builder_with_codec(name, client, prefix, TextKeys)
    }

    /// As [`builder`](Self::builder), with your own key mapping (for key
    /// types without an [`EtcdKey`] implementation, or another layout).
    pub fn builder_with_codec(
        name: impl Into<Arc<str>>,
        client: Client,
        prefix: impl Into<Vec<u8>>,
        codec: impl KeyCodec<O::Key>,
    ) -> EtcdSourceBuilder<O> {
        EtcdSourceBuilder {
            name: name.into(),
            client,
            prefix: prefix.into(),
            codec: Arc::new(codec),
            page_size: DEFAULT_PAGE_SIZE,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// The etcd key an object with `key` is stored under.
    ///
    /// # Errors
    ///
    /// [`EncodeError`] when the key codec cannot store `key`.
    pub fn etcd_key(&self, key: &O::Key) -> Result<Vec<u8>, EncodeError> {
        self.shared.etcd_key(key)
    }

    /// Stored entries skipped so far (bad JSON, wrong shape, too large,
    /// undecodable key), counted once per time seen.
    #[must_use]
    pub fn decode_errors(&self) -> u64 {
        self.shared.decode_errors.load(Ordering::Relaxed)
    }

    /// The entries skipped now: seen undecodable by the last list or a
    /// later watch, and not fixed or deleted since.
    #[must_use]
    pub fn skipped(&self) -> Vec<SkippedEntry> {
        self.shared
            .skipped
            .lock()
            .iter()
            .map(|(key, error)| SkippedEntry {
                key: key.clone(),
                error: Arc::clone(error),
            })
            .collect()
    }
}

impl<O> EtcdSourceBuilder<O>
where
    O: EtcdObject,
{
    /// Keys fetched per list page (default [`DEFAULT_PAGE_SIZE`]).
    pub fn page_size(mut self, keys: NonZeroU32) -> Self {
        self.page_size = keys;
        self
    }

    /// Values larger than this are skipped with
    /// [`DecodeError::TooLarge`] (default [`DEFAULT_MAX_VALUE_BYTES`]).
    pub fn max_value_bytes(mut self, bytes: NonZeroUsize) -> Self {
        self.max_value_bytes = bytes;
        self
    }

    /// How long one request may take (default
    /// [`DEFAULT_REQUEST_TIMEOUT`]); a slower one fails as unavailable.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The source.
    #[must_use]
    pub fn build(self) -> EtcdSource<O> {
        EtcdSource {
            shared: Arc::new(Shared {
                name: self.name,
                client: self.client,
                prefix: self.prefix,
                codec: self.codec,
                page_size: self.page_size,
                max_value_bytes: self.max_value_bytes.get(),
                request_timeout: self.request_timeout,
                decode_errors: AtomicU64::new(0),
                skipped: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// What one stored entry turned out to be.
pub(super) enum Decoded<O: Object> {
    /// A valid object.
    Object(O),
    /// A valid key with a bad value: absent for tend.
    BadValue(O::Key),
    /// Not even a key of this source.
    BadKey,
}

impl<O> Shared<O>
where
    O: EtcdObject,
{
    pub(super) fn etcd_key(&self, key: &O::Key) -> Result<Vec<u8>, EncodeError> {
        let mut full = self.prefix.clone();
        full.extend(self.codec.encode(key)?);
        Ok(full)
    }

    pub(super) fn decode_key(&self, full: &[u8]) -> Result<O::Key, DecodeError> {
        let suffix = full.strip_prefix(self.prefix.as_slice()).unwrap_or(full);
        self.codec.decode(suffix)
    }

    /// Decodes a stored entry, recording (or clearing) a skip.
    pub(super) fn decode(&self, kv: &KeyValue) -> Decoded<O> {
        let key = match self.decode_key(kv.key()) {
            Ok(key) => key,
            Err(error) => {
                self.skip(kv.key(), error);
                return Decoded::BadKey;
            }
        };
        let decoded = decode_value::<O>(&key, kv.value(), kv.mod_revision(), self.max_value_bytes);
        match decoded {
            Ok(object) => {
                self.unskip(kv.key());
                Decoded::Object(object)
            }
            Err(error) => {
                self.skip(kv.key(), error);
                Decoded::BadValue(key)
            }
        }
    }

    fn skip(&self, key: &[u8], error: DecodeError) {
        self.decode_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            source = %self.name,
            key = %String::from_utf8_lossy(key),
            error = %crate::error::error_chain(&error),
            "skipping an undecodable etcd entry"
        );
        self.skipped.lock().insert(key.to_vec(), Arc::new(error));
    }

    pub(super) fn unskip(&self, key: &[u8]) {
        let mut skipped = self.skipped.lock();
        if !skipped.is_empty() {
            skipped.remove(key);
        }
    }

    /// One attempt at a paginated list pinned at the first page's revision.
    async fn list_once(&self) -> Result<Snapshot<O>, etcd_client::Error> {
        let mut kv = self
            .client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let end = prefix_end(&self.prefix);
        let mut from = range_start(&self.prefix);
        let mut pinned = 0;
        let mut objects = Vec::new();
        self.skipped.lock().clear();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(i64::from(self.page_size.get()));
            if pinned != 0 {
                options = options.with_revision(pinned);
            }
            let page: GetResponse = self.timed(kv.get(from.clone(), Some(options))).await?;
            if pinned == 0 {
                pinned = page
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision);
            }
            for entry in page.kvs() {
                if let Decoded::Object(object) = self.decode(entry) {
                    objects.push(object);
                }
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(Snapshot {
            objects,
            revision: revision(pinned),
        })
    }

    /// Runs an etcd request within the request timeout.
    pub(super) async fn timed<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        tokio::time::timeout(self.request_timeout, request)
            .await
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "etcd request timed out",
                )))
            })
    }
}

/// Whether an etcd error says "that revision is compacted".
pub(super) fn is_compacted(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::OutOfRange)
}

#[async_trait]
impl<O> Source for EtcdSource<O>
where
    O: EtcdObject,
{
    type Object = O;

    fn name(&self) -> &str {
        &self.shared.name
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        let mut attempt = 1;
        loop {
            match self.shared.list_once().await {
                Ok(snapshot) => return Ok(snapshot),
                Err(error) if is_compacted(&error) && attempt < LIST_ATTEMPTS => {
                    tracing::debug!(source = %self.shared.name, "compacted mid-list, listing again");
                    attempt += 1;
                }
                Err(error) => return Err(SourceError::unavailable(error)),
            }
        }
    }

    async fn watch(&self, from: Revision) -> Result<crate::source::WatchStream<O>, SourceError> {
        let shared = &self.shared;
        let start = i64::try_from(from.get().saturating_add(1)).unwrap_or(i64::MAX);
        let options = WatchOptions::new()
            .with_range(prefix_end(&shared.prefix))
            .with_start_revision(start)
            .with_progress_notify();
        let mut client = shared
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let stream = shared
            .timed(client.watch(range_start(&shared.prefix), Some(options)))
            .await
            .map_err(SourceError::unavailable)?;
        Ok(watch::open(Arc::clone(&self.shared), stream, from))
    }

    /// The header revision of a get of one key (the prefix itself): the
    /// whole etcd's revision, which writes outside the prefix move too; the
    /// watch's progress notifications move the cache past them.
    async fn head(&self) -> Result<Option<Revision>, SourceError> {
        let shared = &self.shared;
        let mut kv = shared.client.kv_client();
        let answer: GetResponse = shared
            .timed(kv.get(range_start(&shared.prefix), None))
            .await
            .map_err(SourceError::unavailable)?;
        Ok(answer.header().map(|header| revision(header.revision())))
    }
}
