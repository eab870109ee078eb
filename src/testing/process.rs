//! `Process`: one child process of a harness (etcd, kube-apiserver), its
//! output appended to a log file, killed with SIGKILL when dropped.

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use parking_lot::Mutex;

use super::HarnessError;
use super::exec::log_tail;

/// What kills a child process besides [`Process::kill`] and drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiesWith {
    /// Nothing else: a test binary killed with SIGKILL leaves it running
    /// (`testing::etcd`'s servers).
    #[cfg(feature = "etcd")]
    Owner,
    /// On Linux, also the kernel, when the thread that spawned it exits
    /// (`PR_SET_PDEATHSIG`): for `testing::kube`'s processes, spawned from
    /// its harness thread, which lives as long as the test process.
    #[cfg(feature = "kube")]
    HarnessThread,
}

/// A binary that runs as at most one child process at a time.
#[derive(Debug)]
pub(crate) struct Process {
    /// `etcd` or `kube-apiserver`, for errors.
    what: &'static str,
    binary: PathBuf,
    log: PathBuf,
    dies_with: DiesWith,
    child: Mutex<Option<Child>>,
}

impl Process {
    /// A process of `binary`, not started, logging to `log`.
    pub(crate) fn new(
        what: &'static str,
        binary: PathBuf,
        log: PathBuf,
        dies_with: DiesWith,
    ) -> Self {
        Self {
            what,
            binary,
            log,
            dies_with,
            child: Mutex::new(None),
        }
    }

    /// Kills the process if it runs, and starts it again with `args`.
    pub(crate) fn spawn(&self, args: &[OsString]) -> Result<(), HarnessError> {
        self.kill();
        let doing = "opening a log file";
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(HarnessError::io(doing))?;
        let mut command = Command::new(&self.binary);
        command.args(args).stdin(Stdio::null());
        command
            .stdout(log.try_clone().map_err(HarnessError::io(doing))?)
            .stderr(log);
        self.tie(&mut command);
        let child = command
            .spawn()
            .map_err(HarnessError::io("starting a process"))?;
        *self.child.lock() = Some(child);
        Ok(())
    }

    /// Sets up what else kills the process (see [`DiesWith`]).
    #[cfg_attr(not(feature = "kube"), allow(unused_variables))]
    fn tie(&self, command: &mut Command) {
        match self.dies_with {
            #[cfg(feature = "etcd")]
            DiesWith::Owner => {}
            #[cfg(feature = "kube")]
            DiesWith::HarnessThread => super::kube::tie_to_harness_thread(command),
        }
    }

    /// Whether the process runs.
    pub(crate) fn is_running(&self) -> bool {
        self.child
            .lock()
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The running process's id.
    #[cfg(feature = "kube")]
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }

    /// Kills the process with SIGKILL and reaps it. SIGKILL, not SIGTERM:
    /// kube-apiserver can hang on SIGTERM once etcd is gone.
    pub(crate) fn kill(&self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process unless another thread holds it (at process exit,
    /// where waiting could deadlock).
    #[cfg(feature = "kube")]
    pub(crate) fn try_kill(&self) {
        if let Some(mut child) = self.child.try_lock().and_then(|mut child| child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The error for a process that did not become ready within `waited`.
    pub(crate) fn unhealthy(&self, waited: Duration) -> HarnessError {
        HarnessError::Unhealthy {
            process: self.what,
            waited,
            log: log_tail(&self.log),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
