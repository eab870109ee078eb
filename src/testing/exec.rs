//! What the harnesses that run real servers (etcd, kube-apiserver) share:
//! finding a binary, and reading the end of its log for an error.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The binary named by the environment variable `var` if it is set (`None`
/// when that is not a file), else the first `name` on the `PATH`.
pub(crate) fn find_binary(var: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Where [`find_binary`] looked, for an error: the variable's value, or the
/// `PATH`.
#[cfg_attr(not(feature = "kube"), allow(dead_code))]
pub(crate) fn searched(var: &str, name: &str) -> String {
    match std::env::var_os(var) {
        Some(path) => format!("{var}={}", Path::new(&path).display()),
        None => format!("`{name}` on the PATH ({var} is not set)"),
    }
}

/// The last 20 lines of a log file (empty if it cannot be read).
pub(crate) fn log_tail(path: &Path) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_end(&mut bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
