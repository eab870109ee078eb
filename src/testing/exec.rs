//! What the harnesses that run real servers (etcd, kube-apiserver) share
//! besides the process itself: finding a binary, a free port, a startup
//! budget, and the end of a log for an error.

use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::HarnessError;

/// A binary a harness runs, and how it is found.
#[derive(Debug)]
pub(crate) struct Binary {
    /// Its file name on the `PATH`, and its name in errors.
    pub(crate) name: &'static str,
    /// The environment variable that names it, before the `PATH`.
    pub(crate) var: &'static str,
    /// How to get it, for [`HarnessError::NotInstalled`].
    pub(crate) hint: &'static str,
}

impl Binary {
    /// `explicit` if given, else the file the variable names if it is set,
    /// else the first file of that name on the `PATH`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotInstalled`] saying where it looked, when that is
    /// not a file.
    pub(crate) fn find(&self, explicit: Option<PathBuf>) -> Result<PathBuf, HarnessError> {
        let (found, looked_at) = match explicit {
            Some(path) => {
                let looked_at = path.display().to_string();
                (path.is_file().then_some(path), looked_at)
            }
            None => (self.on_env_or_path(), self.searched()),
        };
        found.ok_or(HarnessError::NotInstalled {
            binary: self.name,
            var: self.var,
            looked_at,
            hint: self.hint,
        })
    }

    /// The file the variable names (`None` when that is not a file), else
    /// the first on the `PATH`.
    fn on_env_or_path(&self) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(self.var) {
            let path = PathBuf::from(path);
            return path.is_file().then_some(path);
        }
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|dir| dir.join(self.name))
            .find(|candidate| candidate.is_file())
    }

    /// Where [`on_env_or_path`](Self::on_env_or_path) looked: the variable's value, or
    /// the `PATH`.
    fn searched(&self) -> String {
        match std::env::var_os(self.var) {
            Some(path) => format!("{}={}", self.var, Path::new(&path).display()),
            None => format!("`{}` on the PATH ({} is not set)", self.name, self.var),
        }
    }
}

/// A free loopback port, held open until the listener is dropped (right
/// before the process that is to bind it is spawned).
pub(crate) fn free_port() -> Result<(TcpListener, SocketAddr), HarnessError> {
    let doing = "finding a free port";
    let listener = TcpListener::bind("127.0.0.1:0").map_err(HarnessError::io(doing))?;
    let address = listener.local_addr().map_err(HarnessError::io(doing))?;
    Ok((listener, address))
}

/// How long a start may take, in real time: a budget that holds under
/// tokio's paused clock, where tokio's time would not pass while a server
/// boots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    started: Instant,
    total: Duration,
}

impl Budget {
    /// A budget of `total`, from now.
    pub(crate) fn starting_now(total: Duration) -> Self {
        Self {
            started: Instant::now(),
            total,
        }
    }

    /// The real time since the budget started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the budget is spent.
    pub(crate) fn is_spent(&self) -> bool {
        self.elapsed() >= self.total
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
