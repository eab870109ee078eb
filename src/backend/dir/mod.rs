//! A [`Source`] over a directory of files, one object per file (feature
//! `dir`).
//!
//! The desired state of a GitOps tool is a directory: a checkout of a
//! repository, one file per object. A [`DirSource`] lists it by reading
//! every file, and watches it with the operating system's file
//! notifications (inotify, FSEvents, kqueue, ReadDirectoryChangesW, through
//! the [`notify`](https://docs.rs/notify) crate).
//!
//! # Files and keys
//!
//! Files are decoded by their extension: [`DirSource::json`] reads `.json`
//! files with `serde_json`, and [`DirSource::with_decoder`] adds any other
//! format (YAML through `serde_yaml`, TOML …) without tend depending on it.
//! Subdirectories are read too; hidden entries (a leading `.`, such as
//! `.git` or an editor's swap file) and files with no decoder are ignored.
//!
//! The key is the object's own ([`Object::key`]), as in every source. A
//! decoder is given the file's path (relative to the directory), so a type
//! whose identity is its file name can take its key from there. Two files
//! whose objects have the same key are an error: the second is rejected
//! ([`FileError::DuplicateKey`]) until the first lets the key go.
//!
//! # Revisions
//!
//! A directory has no history, so the source makes one: it remembers each
//! file's content (a length and a hash) and each object, and every
//! difference it finds (a new, changed or removed file) becomes a change
//! with the next revision of a counter kept in memory. The last 8192
//! changes are kept for watches; a watch from further back fails with
//! [`SourceError::Expired`] and the informer lists again. Revisions restart
//! from zero with the process: a source serves the informers of its
//! process, which list when they start.
//!
//! [`list`](crate::Source::list) reads every file and diffs with what is known, so
//! a file deleted while nobody watched is reported deleted. A watch first
//! starts the OS watcher, then reads the whole directory again (closing the
//! gap since the list), then re-reads the paths each batch of notifications
//! names, a batch being the notifications of a short window
//! ([`DirSource::with_debounce`], 50 ms by default) so that a file is read
//! once its writer is done. A rename is a deletion at the old path and a
//! creation at the new one; a directory renamed or deleted takes its files
//! with it.
//!
//! When notifications are lost (the OS queue overflowed, or the source's
//! own buffer of [`DirSource::with_notification_buffer`] was full) the
//! stream reads the whole directory again, which finds every difference,
//! deletions included: the informer gets ordinary changes and needs no
//! relist. When the OS refuses to watch (no inotify watches left, an
//! unsupported filesystem) the stream logs it and reads the whole directory
//! on an interval instead ([`DirSource::with_poll_interval`]).
//!
//! # Malformed files
//!
//! A file that cannot be read or decoded is rejected: a typed
//! [`FileError`] is logged (`tracing::warn`), counted
//! ([`DirStats::decode_errors`]) and listed ([`DirSource::malformed`]);
//! every other file keeps working. The object keeps its **last good state**
//! (a file that never decoded provides none): for GitOps, a typo in a
//! file must not delete what it describes. The next change to the file is
//! read again, so a fixed file is picked up.
//!
//! An unreadable directory fails the list or the watch
//! ([`SourceError::Unavailable`]) rather than deleting what it held; an
//! unreadable subdirectory keeps what was known under it.
//!
//! # Blocking
//!
//! File I/O runs on tokio's blocking threads (`spawn_blocking`), one scan at
//! a time per source. A scan runs to its end even when the future that
//! started it is dropped; dropping a watch stream stops its OS watcher.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use serde::Deserialize;
//! use tend::dir::DirSource;
//! use tend::{Informer, Revision};
//!
//! #[derive(Clone, Debug, Deserialize)]
//! struct App {
//!     name: String,
//!     replicas: u32,
//!     #[serde(skip)]
//!     version: Revision,
//! }
//! tend::impl_object!(App, key: name: String, version: version);
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("web.json"), r#"{"name": "web", "replicas": 3}"#)?;
//! std::fs::write(dir.path().join("broken.json"), "{ not json")?;
//!
//! let source = DirSource::<App>::json("apps", dir.path());
//! let stats = source.stats_handle();
//! let informer = Informer::builder(source).build()?;
//! let stop = tend::CancellationToken::new();
//! let run = tokio::spawn({
//!     let (informer, stop) = (informer.clone(), stop.clone());
//!     async move { informer.run(stop).await }
//! });
//! let store = informer.cache();
//! store.wait_synced(Duration::from_secs(10)).await?;
//! assert_eq!(store.get(&"web".to_owned()).unwrap().replicas, 3);
//! assert_eq!(stats.stats().malformed, 1); // broken.json, logged and skipped
//!
//! // An edit reaches the cache through a file notification.
//! std::fs::write(dir.path().join("web.json"), r#"{"name": "web", "replicas": 5}"#)?;
//! tokio::time::timeout(Duration::from_secs(10), async {
//!     while store.get(&"web".to_owned()).unwrap().replicas != 5 {
//!         tokio::time::sleep(Duration::from_millis(10)).await;
//!     }
//! })
//! .await?;
//! stop.cancel();
//! run.await??;
//! # Ok(()) }
//! ```
//!
//! [`Source`]: crate::Source
//! [`Source::list`]: crate::Source::list
//! [`Object::key`]: crate::Object::key
//! [`SourceError::Expired`]: crate::SourceError::Expired
//! [`SourceError::Unavailable`]: crate::SourceError::Unavailable

mod error;
mod scan;
mod source;
mod table;
mod watch;

pub use self::error::FileError;
pub use self::source::{DirSource, DirStats, DirStatsHandle};
