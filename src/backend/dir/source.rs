//! `DirSource`: the engine that scans, decodes and numbers a directory's changes.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::error::FileError;
use super::scan;
use super::table::{Found, Table};
use super::watch;
use crate::error::BoxError;
use crate::object::{Object, Revision};
use crate::source::{Snapshot, Source, SourceError, WatchStream};

/// A decoder: a file's path (relative to the directory) and content in, an
/// object out.
type DecodeFn<O> = Arc<dyn Fn(&Path, &[u8]) -> Result<O, BoxError> + Send + Sync>;

/// The shortest fallback poll interval.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The decoders, by lower-case extension.
pub(super) struct Decoders<O> {
    pub(super) by_extension: HashMap<String, DecodeFn<O>>,
}

impl<O> Clone for Decoders<O> {
    fn clone(&self) -> Self {
        Self {
            by_extension: self.by_extension.clone(),
        }
    }
}

impl<O> Decoders<O> {
    pub(super) fn decoder(&self, path: &Path) -> Option<&DecodeFn<O>> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        self.by_extension.get(&extension)
    }
}

/// What every scan and stream of one source shares.
///
/// # Locks
///
/// `scanning` serialises scans (taken only on blocking threads, for a whole
/// scan), so reads are applied in the order they were made. `table` is taken
/// briefly, under `scanning` or alone (lists, streams, stats); never the
/// reverse.
pub(super) struct Engine<O: Object> {
    pub(super) name: Arc<str>,
    pub(super) root: PathBuf,
    pub(super) hasher: foldhash::quality::RandomState,
    pub(super) scanning: Mutex<()>,
    pub(super) table: Mutex<Table<O>>,
    /// The table's revision, for streams waiting for another stream's scan.
    pub(super) changed: tokio::sync::watch::Sender<Revision>,
    /// Notifications dropped because a stream's buffer was full.
    pub(super) missed: Arc<AtomicU64>,
}

impl<O: Object> Engine<O> {
    /// Applies a scan's findings; returns the files to read again.
    pub(super) fn commit(&self, found: Vec<(PathBuf, Found<O>)>) -> Vec<PathBuf> {
        if found.is_empty() {
            return Vec::new();
        }
        let (retry, revision) = {
            let mut table = self.table.lock();
            let retry = table.apply(found);
            (retry, table.revision())
        };
        self.changed.send_if_modified(|current| {
            let moved = *current != revision;
            *current = revision;
            moved
        });
        retry
    }

    pub(super) fn stats(&self) -> DirStats {
        let table = self.table.lock();
        DirStats {
            revision: table.revision(),
            files: table.files(),
            objects: table.objects(),
            malformed: table.malformed().len(),
            decode_errors: table.counters.decode_errors,
            full_scans: table.counters.full_scans,
            missed_notifications: self.missed.load(Ordering::Relaxed),
        }
    }
}

/// A [`Source`] over a directory, one object per file; see the
/// [module docs](super).
///
/// # Examples
///
/// ```
/// use serde::Deserialize;
/// use tend::dir::DirSource;
/// use tend::{Revision, Source};
///
/// #[derive(Clone, Debug, Deserialize)]
/// struct App { name: String, replicas: u32, #[serde(skip)] version: Revision }
/// tend::impl_object!(App, key: name: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("web.json"), r#"{"name": "web", "replicas": 3}"#)?;
/// std::fs::write(dir.path().join("README.md"), "no decoder for .md: ignored")?;
///
/// let source = DirSource::<App>::json("apps", dir.path());
/// let listed = source.list().await?; // what an informer's first list reads
/// assert_eq!(listed.objects.len(), 1);
/// assert_eq!((listed.objects[0].name.as_str(), listed.objects[0].replicas), ("web", 3));
/// assert_eq!(listed.revision, Revision::new(1)); // the source numbers the changes it finds
/// # Ok(()) }
/// ```
pub struct DirSource<O: Object> {
    engine: Arc<Engine<O>>,
    decoders: Arc<Decoders<O>>,
    debounce: Duration,
    buffer: NonZeroUsize,
    poll_interval: Duration,
}

impl<O: Object> fmt::Debug for DirSource<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut extensions: Vec<&String> = self.decoders.by_extension.keys().collect();
        extensions.sort();
        f.debug_struct("DirSource")
            .field("name", &self.engine.name)
            .field("root", &self.engine.root)
            .field("extensions", &extensions)
            .field("debounce", &self.debounce)
            .field("buffer", &self.buffer)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl<O: Object + DeserializeOwned> DirSource<O> {
    /// A source named `name` over the `.json` files in and under `root`,
    /// decoded with `serde_json`.
    #[must_use]
    pub fn json(name: impl Into<Arc<str>>, root: impl Into<PathBuf>) -> Self {
        Self::new(name, root).with_decoder("json", |_, bytes| serde_json::from_slice::<O>(bytes))
    }
}

impl<O: Object> DirSource<O> {
    /// A source named `name` over `root`, with no decoder yet: add one per
    /// extension with [`with_decoder`](Self::with_decoder).
    ///
    /// The directory is first read by the first [`list`](Source::list); it
    /// need not exist before (a list fails until it does).
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>, root: impl Into<PathBuf>) -> Self {
        let engine = Engine {
            name: name.into(),
            root: root.into(),
            hasher: foldhash::quality::RandomState::default(),
            scanning: Mutex::new(()),
            table: Mutex::new(Table::new()),
            changed: tokio::sync::watch::Sender::new(Revision::ZERO),
            missed: Arc::new(AtomicU64::new(0)),
        };
        Self {
            engine: Arc::new(engine),
            decoders: Arc::new(Decoders {
                by_extension: HashMap::new(),
            }),
            debounce: Duration::from_millis(50),
            buffer: NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
            poll_interval: Duration::from_secs(5),
        }
    }

    /// Decodes files ending in `.extension` (case-insensitive; a leading dot
    /// is ignored) with `decode`, replacing any decoder for it. `decode` gets
    /// the file's path relative to the directory, and its content; an error
    /// rejects the file (see [Malformed files](super#malformed-files)), and
    /// so does a panic.
    ///
    /// YAML, for example, with `serde_yaml`:
    /// `source.with_decoder("yaml", |_, bytes| serde_yaml::from_slice(bytes))`.
    #[must_use]
    pub fn with_decoder<F, E>(mut self, extension: &str, decode: F) -> Self
    where
        F: Fn(&Path, &[u8]) -> Result<O, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let extension = extension.trim_start_matches('.').to_ascii_lowercase();
        let decode: DecodeFn<O> =
            Arc::new(move |path, bytes| decode(path, bytes).map_err(Into::into));
        Arc::make_mut(&mut self.decoders)
            .by_extension
            .insert(extension, decode);
        self
    }

    /// How long a watch gathers notifications before reading the files they
    /// name (default 50 ms): a file being written is read once, when its
    /// writer is done. Zero reads at once.
    #[must_use]
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// How many notifications a watch buffers before it loses some
    /// (default 4096). Lost notifications are not lost changes: the watch
    /// then reads the whole directory again.
    #[must_use]
    pub fn with_notification_buffer(mut self, buffer: NonZeroUsize) -> Self {
        self.buffer = buffer;
        self
    }

    /// How often a watch reads the whole directory when the OS refuses to
    /// watch it (default 5 s; at least 10 ms).
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(MIN_POLL_INTERVAL);
        self
    }

    /// The directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.engine.root
    }

    /// The source's counters now.
    #[must_use]
    pub fn stats(&self) -> DirStats {
        self.engine.stats()
    }

    /// A handle that reads this source's counters after the source has been
    /// moved into an informer.
    #[must_use]
    pub fn stats_handle(&self) -> DirStatsHandle {
        DirStatsHandle {
            engine: Arc::clone(&self.engine) as Arc<dyn ReadStats>,
        }
    }

    /// The files rejected now, each with why (paths relative to the
    /// directory).
    #[must_use]
    pub fn malformed(&self) -> Vec<Arc<FileError>> {
        self.engine.table.lock().malformed()
    }

    /// Reads the whole directory on a blocking thread.
    async fn scan_all(&self) -> Result<(), SourceError> {
        let (engine, decoders) = (Arc::clone(&self.engine), Arc::clone(&self.decoders));
        tokio::task::spawn_blocking(move || scan::full(&engine, &decoders))
            .await
            .map_err(SourceError::unavailable)?
    }
}

/// A [`DirSource`]'s counters at one moment.
///
/// # Examples
///
/// ```
/// use tend::dir::DirSource;
/// use tend::Source;
/// # #[derive(Clone, Debug, serde::Deserialize)]
/// # struct App { name: String, #[serde(skip)] version: tend::Revision }
/// # tend::impl_object!(App, key: name: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("web.json"), r#"{"name": "web"}"#)?;
/// std::fs::write(dir.path().join("broken.json"), "{ not json")?;
/// let source = DirSource::<App>::json("apps", dir.path());
/// source.list().await?;
/// let stats = source.stats();
/// assert_eq!((stats.files, stats.objects, stats.malformed), (2, 1, 1));
/// assert_eq!((stats.decode_errors, stats.full_scans), (1, 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirStats {
    /// The latest revision given to a change.
    pub revision: Revision,
    /// Files known (read at least once, decoded or not).
    pub files: usize,
    /// Objects held.
    pub objects: usize,
    /// Files whose current content is rejected.
    pub malformed: usize,
    /// Rejections so far (each content of a file counts once).
    pub decode_errors: u64,
    /// Reads of the whole directory so far: lists, watch starts, and
    /// rescans after lost notifications or by polling.
    pub full_scans: u64,
    /// Notifications dropped because a watch's buffer was full (each
    /// batch of losses is answered by a full scan).
    pub missed_notifications: u64,
}

/// Reads a [`DirSource`]'s counters and rejected files from anywhere (see
/// [`DirSource::stats_handle`]).
///
/// # Examples
///
/// ```
/// use tend::dir::DirSource;
/// use tend::Informer;
/// # #[derive(Clone, Debug, serde::Deserialize)]
/// # struct App { name: String, #[serde(skip)] version: tend::Revision }
/// # tend::impl_object!(App, key: name: String, version: version);
///
/// let dir = tempfile::tempdir()?;
/// let source = DirSource::<App>::json("apps", dir.path());
/// let stats = source.stats_handle(); // taken before the source moves
/// let informer = Informer::builder(source).build()?;
/// assert_eq!(stats.stats().full_scans, 0); // nothing read until the informer runs
/// assert!(stats.malformed().is_empty());
/// # drop(informer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct DirStatsHandle {
    engine: Arc<dyn ReadStats>,
}

/// An engine's counters, whatever its object type.
trait ReadStats: Send + Sync {
    fn stats(&self) -> DirStats;
    fn malformed(&self) -> Vec<Arc<FileError>>;
}

impl<O: Object> ReadStats for Engine<O> {
    fn stats(&self) -> DirStats {
        Engine::stats(self)
    }

    fn malformed(&self) -> Vec<Arc<FileError>> {
        self.table.lock().malformed()
    }
}

impl fmt::Debug for DirStatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirStatsHandle").finish_non_exhaustive()
    }
}

impl DirStatsHandle {
    /// The counters now.
    #[must_use]
    pub fn stats(&self) -> DirStats {
        self.engine.stats()
    }

    /// The files rejected now.
    #[must_use]
    pub fn malformed(&self) -> Vec<Arc<FileError>> {
        self.engine.malformed()
    }
}

#[async_trait]
impl<O: Object> Source for DirSource<O> {
    type Object = O;

    fn name(&self) -> &str {
        &self.engine.name
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        self.scan_all().await?;
        Ok(self.engine.table.lock().snapshot())
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<O>, SourceError> {
        self.engine.table.lock().check_watchable(from)?;
        let config = watch::Config {
            debounce: self.debounce,
            buffer: self.buffer,
            poll_interval: self.poll_interval,
        };
        watch::start(
            Arc::clone(&self.engine),
            Arc::clone(&self.decoders),
            config,
            from,
        )
        .await
    }
}
