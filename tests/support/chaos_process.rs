//! What every multi-process chaos test shares, whatever its backend: the
//! replica processes as the parent sees them (`Process`, signals), and
//! the reconcile log a replica writes (`Log`, `Span`: the lines
//! `chaos_log.rs` reads back).

#![allow(dead_code, unreachable_pub)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::chaos_log::Death;

/// Wall-clock nanoseconds: the logs of several processes are compared.
pub fn wall_ns() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_nanos()).unwrap()
}

/// A replica's log: a line when a reconcile starts and one when it ends
/// (also when it is cancelled: the guard's drop), wall-clock nanoseconds.
pub struct Log(pub Mutex<std::fs::File>);

impl Log {
    pub fn line(&self, line: &str) {
        let mut file = self.0.lock();
        file.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// Logs a reconcile's end when dropped: at its end, or when cancelled.
pub struct Span<'a> {
    pub log: &'a Log,
    pub key: String,
    pub token: u64,
    pub outcome: &'static str,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        let (key, token, outcome) = (&self.key, self.token, self.outcome);
        self.log
            .line(&format!("E {key} {token} {} {outcome}", wall_ns()));
    }
}

/// Sends `signal` (`-STOP`, `-TERM`, …) to `child`.
pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} failed");
}

/// The `p` quantile of `sorted` (nearest rank), zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * (sorted.len().saturating_sub(1)) as f64).round() as usize;
    sorted.get(rank).copied().unwrap_or_default()
}

/// A replica process as the parent sees it: its current child, and its
/// lives, each logging to a file of its own under `dir`.
pub struct Process {
    pub id: &'static str,
    child: Option<Child>,
    lives: u32,
    dir: PathBuf,
}

impl Process {
    pub fn new(id: &'static str, dir: PathBuf) -> Self {
        Self {
            id,
            child: None,
            lives: 0,
            dir,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("{}.{}.log", self.id, self.lives))
    }

    /// Starts a new life with `command` (the replica entry point), telling
    /// it its id and log; the parent holds its stdin, whose end ends it.
    pub fn start(&mut self, mut command: Command) {
        assert!(self.child.is_none(), "{} runs already", self.id);
        self.lives += 1;
        let child = command
            .env("TEND_CHAOS_REPLICA", self.id)
            .env("TEND_CHAOS_LOG", self.log_path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the replica process starts");
        self.child = Some(child);
    }

    /// The running child.
    pub fn child(&self) -> &Child {
        self.child.as_ref().expect("the replica runs")
    }

    /// Whether a child runs (it may have exited on its own since).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL; returns when the process is gone.
    pub fn kill(&mut self) -> Death {
        let mut child = self.child.take().expect("the replica runs");
        child.kill().unwrap();
        child.wait().unwrap();
        self.death()
    }

    /// Its death, if it exited on its own.
    pub fn has_exited(&mut self) -> Option<Death> {
        let child = self.child.as_mut()?;
        child.try_wait().unwrap()?;
        self.child = None;
        Some(self.death())
    }

    /// Waits (bounded) for the process to exit on its own.
    pub async fn exited(&mut self, limit: Duration) -> Death {
        let started = Instant::now();
        loop {
            if let Some(death) = self.has_exited() {
                return death;
            }
            assert!(
                started.elapsed() < limit,
                "{} did not stop within {limit:?} of losing its membership",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn death(&self) -> Death {
        Death {
            log: self.log_path(),
            at: wall_ns(),
            paused: false,
        }
    }
}
