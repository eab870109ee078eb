//! Why one file of a directory source was rejected.

use std::path::PathBuf;

use crate::error::BoxError;

/// Why a file of a [`DirSource`](super::DirSource) holds no object now.
///
/// A rejected file does not stop the source: the error is logged, counted
/// ([`DirStats::decode_errors`](super::DirStats::decode_errors)), listed by
/// [`DirSource::malformed`](super::DirSource::malformed), and the file is read
/// again on its next change. Paths are relative to the directory.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use tend::dir::{DirSource, FileError};
/// use tend::Source;
/// # #[derive(Clone, Debug, serde::Deserialize)]
/// # struct App { name: String, #[serde(skip)] version: tend::Revision }
/// # tend::impl_object!(App, key: name: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.json"), r#"{"name": "web"}"#)?;
/// std::fs::write(dir.path().join("b.json"), r#"{"name": "web"}"#)?; // the same key
/// let source = DirSource::<App>::json("apps", dir.path());
/// assert_eq!(source.list().await?.objects.len(), 1);
/// let rejected = source.malformed();
/// assert!(matches!(&*rejected[0], FileError::DuplicateKey { .. }));
/// assert_eq!(rejected[0].path(), Path::new("b.json"));
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file exists but could not be read (permissions, an I/O error).
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },
    /// The decoder for the file's extension refused its content.
    #[error("cannot decode {}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        #[source]
        source: BoxError,
    },
    /// The file's object has a key that another file already holds.
    #[error("{} holds key {key}, already held by {}", path.display(), holder.display())]
    DuplicateKey {
        /// The file that was rejected.
        path: PathBuf,
        /// The key, as `Debug` shows it.
        key: String,
        /// The file that holds the key.
        holder: PathBuf,
    },
}

impl FileError {
    /// The file this error is about, relative to the directory.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        match self {
            Self::Read { path, .. }
            | Self::Decode { path, .. }
            | Self::DuplicateKey { path, .. } => path,
        }
    }
}
