//! `Process`: one child process of a control plane, its output appended to
//! a log file, killed with SIGKILL when dropped.

use std::ffi::OsString;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use parking_lot::Mutex;

use super::KubeHarnessError;
use super::runtime::THREAD_NAME;
use crate::testing::exec::log_tail;

/// A binary that runs as at most one child process at a time.
#[derive(Debug)]
pub(super) struct Process {
    /// `etcd` or `kube-apiserver`, for errors.
    what: &'static str,
    binary: PathBuf,
    log: PathBuf,
    child: Mutex<Option<Child>>,
}

impl Process {
    /// A process of `binary`, not started, logging to `log`.
    pub(super) fn new(what: &'static str, binary: PathBuf, log: PathBuf) -> Self {
        Self {
            what,
            binary,
            log,
            child: Mutex::new(None),
        }
    }

    /// Kills the process if it runs, and starts it again with `args`.
    ///
    /// Called on the harness thread (see [`runtime`](super::runtime)): on
    /// Linux the child is killed when the thread that spawned it exits.
    pub(super) fn spawn(&self, args: &[OsString]) -> Result<(), KubeHarnessError> {
        debug_assert_eq!(std::thread::current().name(), Some(THREAD_NAME));
        self.kill();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(KubeHarnessError::io("opening a log file"))?;
        let mut command = Command::new(&self.binary);
        command.args(args).stdin(Stdio::null());
        command
            .stdout(
                log.try_clone()
                    .map_err(KubeHarnessError::io("opening a log file"))?,
            )
            .stderr(log);
        #[cfg(target_os = "linux")]
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(KubeHarnessError::io("starting a process"))?;
        *self.child.lock() = Some(child);
        Ok(())
    }

    /// Whether the process runs.
    pub(super) fn is_running(&self) -> bool {
        self.child
            .lock()
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The running process's id.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }

    /// Kills the process with SIGKILL and reaps it. SIGKILL, not SIGTERM:
    /// kube-apiserver can hang on SIGTERM once etcd is gone.
    pub(super) fn kill(&self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process unless another thread holds it (at process exit,
    /// where waiting could deadlock).
    pub(super) fn try_kill(&self) {
        if let Some(mut child) = self.child.try_lock().and_then(|mut child| child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The error for a process that did not become ready within `waited`.
    pub(super) fn unhealthy(&self, waited: Duration) -> KubeHarnessError {
        KubeHarnessError::Unhealthy {
            what: self.what,
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

/// A free loopback port, held open until the listener is dropped (right
/// before the process that is to bind it is spawned).
pub(super) fn free_port() -> Result<(TcpListener, SocketAddr), KubeHarnessError> {
    let doing = "finding a free port";
    let listener = TcpListener::bind("127.0.0.1:0").map_err(KubeHarnessError::io(doing))?;
    let address = listener.local_addr().map_err(KubeHarnessError::io(doing))?;
    Ok((listener, address))
}

/// Has the kernel SIGKILL the child when the thread that spawns it exits
/// (with the whole test process, for the harness thread), so that a test
/// binary that dies without running destructors leaves no server behind.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // `pre_exec`; see the SAFETY comment.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;

    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed: it calls `prctl` and `getppid`,
    // and builds errors that do not allocate.
    unsafe {
        command.pre_exec(move || {
            let signal = libc::SIGKILL as libc::c_ulong;
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: no signal will come.
            if libc::getppid() != parent {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            Ok(())
        });
    }
}
