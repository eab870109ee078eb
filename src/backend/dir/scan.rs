//! Reading the directory: a whole scan (a list, or after missed
//! notifications) or the paths a batch of notifications named. Blocking
//! file I/O: these run on tokio's blocking threads, one scan at a time.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::error::FileError;
use super::source::{Decoders, Engine};
use super::table::{Fingerprint, Found};
use crate::object::Object;
use crate::source::SourceError;

/// Files read, decoded and applied per lock of the table.
const CHUNK: usize = 256;

/// Rounds of re-reading files whose key was freed, per scan.
const RETRY_ROUNDS: usize = 16;

/// Reads every file under the root and applies the differences, deletions
/// included.
pub(super) fn full<O: Object>(
    engine: &Engine<O>,
    decoders: &Decoders<O>,
) -> Result<(), SourceError> {
    let _scanning = engine.scanning.lock();
    // An unreadable root fails the scan rather than deleting everything.
    std::fs::read_dir(&engine.root).map_err(|error| {
        SourceError::unavailable(std::io::Error::new(
            error.kind(),
            format!("cannot read directory {}: {error}", engine.root.display()),
        ))
    })?;
    let mut found = Walk::default();
    walk(&engine.root, Path::new(""), decoders, &mut found);
    let known = engine.table.lock().known_under(Path::new(""));
    let gone = known.into_iter().filter(|path| found.lost(path)).collect();
    engine.table.lock().counters.full_scans += 1;
    let present: Vec<PathBuf> = found.files.into_iter().collect();
    apply(engine, decoders, gone, &present);
    Ok(())
}

/// Reads what is now at each of `paths` (absolute, from notifications):
/// a file, a directory (walked), or nothing (deletes what was known there).
/// `roots`: the root as given and as the OS may report it (canonical).
pub(super) fn paths<O: Object>(
    engine: &Engine<O>,
    decoders: &Decoders<O>,
    roots: &[PathBuf],
    paths: BTreeSet<PathBuf>,
) {
    let _scanning = engine.scanning.lock();
    let mut found = Walk::default();
    let mut gone = Vec::new();
    for path in paths {
        let Some(relative) = roots.iter().find_map(|root| relative(root, &path)) else {
            continue;
        };
        walk(
            &engine.root.join(&relative),
            &relative,
            decoders,
            &mut found,
        );
        let known = engine.table.lock().known_under(&relative);
        gone.extend(known.into_iter().filter(|known| found.lost(known)));
    }
    gone.sort();
    gone.dedup();
    let present: Vec<PathBuf> = found.files.into_iter().collect();
    apply(engine, decoders, gone, &present);
}

/// `path` relative to `root`, unless it is outside it, the root itself or
/// hidden.
fn relative(root: &Path, path: &Path) -> Option<PathBuf> {
    let relative = path.strip_prefix(root).ok()?;
    let visible = relative.components().all(|component| match component {
        Component::Normal(name) => !name.to_string_lossy().starts_with('.'),
        _ => false,
    });
    (visible && !relative.as_os_str().is_empty()).then(|| relative.to_owned())
}

/// What a walk found.
#[derive(Default)]
struct Walk {
    /// Decodable files, relative to the root.
    files: BTreeSet<PathBuf>,
    /// Directories that could not be read: what is known under them is kept
    /// (an unreadable directory is not proof that its files are gone).
    unreadable: Vec<PathBuf>,
}

impl Walk {
    /// Whether a known file missing from the walk is gone.
    fn lost(&self, path: &Path) -> bool {
        !self.files.contains(path) && !self.unreadable.iter().any(|dir| path.starts_with(dir))
    }
}

/// Adds the decodable files at or under `path` (`relative` to the root) to
/// `walk`. Hidden entries (a leading `.`: `.git`, editors' swap files) are
/// skipped; symbolic links to files are followed, to directories not (no
/// loops) unless it is the root. A path that does not exist holds nothing.
fn walk<O>(path: &Path, relative: &Path, decoders: &Decoders<O>, found: &mut Walk) {
    let metadata = if relative.as_os_str().is_empty() {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == ErrorKind::NotFound => return,
        Err(_) => return found.unreadable.push(relative.to_owned()),
    };
    if !metadata.is_dir() {
        let file = metadata.is_file() || (metadata.is_symlink() && is_file(path));
        if file && decoders.decoder(relative).is_some() {
            found.files.insert(relative.to_owned());
        }
        return;
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(error) if error.kind() == ErrorKind::NotFound => return,
        Err(_) => return found.unreadable.push(relative.to_owned()),
    };
    for entry in entries {
        let Ok(entry) = entry else {
            return found.unreadable.push(relative.to_owned());
        };
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with('.') {
            walk(&entry.path(), &relative.join(&name), decoders, found);
        }
    }
}

fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file())
}

/// Applies `gone` first (so a renamed object's key is free for its new
/// file), then reads `present` in chunks, then re-reads files whose key was
/// freed.
fn apply<O: Object>(
    engine: &Engine<O>,
    decoders: &Decoders<O>,
    gone: Vec<PathBuf>,
    present: &[PathBuf],
) {
    let mut retry = engine.commit(gone.into_iter().map(|path| (path, Found::Gone)).collect());
    for chunk in present.chunks(CHUNK) {
        retry.extend(read_chunk(engine, decoders, chunk));
    }
    for _ in 0..RETRY_ROUNDS {
        if retry.is_empty() {
            break;
        }
        let again = std::mem::take(&mut retry);
        for chunk in again.chunks(CHUNK) {
            retry.extend(read_chunk(engine, decoders, chunk));
        }
    }
}

/// Reads, fingerprints and (when changed) decodes a chunk of files, then
/// applies them under one lock. Returns the files to read again.
fn read_chunk<O: Object>(
    engine: &Engine<O>,
    decoders: &Decoders<O>,
    chunk: &[PathBuf],
) -> Vec<PathBuf> {
    let read: Vec<(PathBuf, std::io::Result<Vec<u8>>)> = chunk
        .iter()
        .map(|path| (path.clone(), std::fs::read(engine.root.join(path))))
        .collect();
    let mut found = Vec::with_capacity(read.len());
    let fingerprinted: Vec<_> = read
        .into_iter()
        .map(|(path, bytes)| {
            let fingerprint = bytes.as_ref().map_or(
                Fingerprint {
                    len: u64::MAX,
                    hash: 0,
                },
                |bytes| Fingerprint {
                    len: bytes.len() as u64,
                    hash: engine.hasher.hash_one(bytes),
                },
            );
            (path, fingerprint, bytes)
        })
        .collect();
    let changed: Vec<_> = {
        let table = engine.table.lock();
        fingerprinted
            .into_iter()
            .filter(|(path, fingerprint, _)| !table.unchanged(path, *fingerprint))
            .collect()
    };
    for (path, fingerprint, bytes) in changed {
        let decoded = match bytes {
            Ok(bytes) => decode(decoders, &path, &bytes),
            Err(error) if error.kind() == ErrorKind::NotFound => {
                found.push((path, Found::Gone));
                continue;
            }
            Err(source) => Err(FileError::Read {
                path: path.clone(),
                source,
            }),
        };
        found.push((
            path,
            Found::File {
                fingerprint,
                decoded,
            },
        ));
    }
    engine.commit(found)
}

fn decode<O>(decoders: &Decoders<O>, path: &Path, bytes: &[u8]) -> Result<O, FileError> {
    let decoder = decoders.decoder(path).ok_or_else(|| FileError::Decode {
        path: path.to_owned(),
        source: "no decoder for this extension".into(),
    })?;
    // A decoder that panics rejects this file only.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder(path, bytes)))
        .unwrap_or_else(|_| Err("the decoder panicked".into()));
    decoded.map_err(|source| FileError::Decode {
        path: path.to_owned(),
        source,
    })
}
