//! The harness thread: one thread for the whole test process, with a tokio
//! runtime of its own, from which every control plane's processes are
//! spawned and on which its async work (probes, etcd requests) runs.
//!
//! Why a thread of its own:
//! - On Linux the processes get `PR_SET_PDEATHSIG`, which fires when the
//!   *thread* that spawned them exits. Tests run on threads that end with
//!   the test, while a shared plane (or one restarted by a test) must
//!   outlive them; this thread lives as long as the process.
//! - Its clock is never paused: probe timeouts stay real time when the
//!   test's runtime runs on a paused clock, where a timer fires as soon as
//!   the runtime idles (while it waits for a TLS handshake, say).
//! - Nothing a plane keeps belongs to one test's runtime, so a plane
//!   started in one test serves the next.

use std::future::Future;
use std::process::Command;
use std::sync::OnceLock;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::testing::HarnessError;

/// The harness thread's name (processes must be spawned from it).
const THREAD_NAME: &str = "tend-kube-harness";

/// The harness runtime, or why it could not be started.
static HARNESS: OnceLock<Result<Handle, std::io::ErrorKind>> = OnceLock::new();

/// Runs `future` on the harness thread and waits for its output.
///
/// # Cancel safety
///
/// Dropping the returned future aborts the task at its next await point
/// (its values are dropped, which kills the processes it started).
pub(super) async fn run<F>(future: F) -> Result<F::Output, HarnessError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = HARNESS
        .get_or_init(|| start().map_err(|error| error.kind()))
        .as_ref()
        .map_err(|&kind| HarnessError::Io {
            doing: "starting the harness thread",
            source: kind.into(),
        })?;
    let mut task = AbortOnDrop(handle.spawn(future));
    match (&mut task.0).await {
        Ok(output) => Ok(output),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(HarnessError::Io {
            doing: "running on the harness thread",
            source: std::io::Error::other(error),
        }),
    }
}

/// Starts the harness thread; it runs until the process exits.
fn start() -> std::io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(THREAD_NAME.to_owned())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Has the kernel kill the process `command` spawns when the harness thread
/// exits (on Linux; elsewhere nothing does): called by
/// [`Process`](crate::testing::process::Process)es that die with it.
pub(crate) fn tie_to_harness_thread(command: &mut Command) {
    // The kernel signals when the spawning *thread* exits.
    debug_assert_eq!(std::thread::current().name(), Some(THREAD_NAME));
    #[cfg(target_os = "linux")]
    die_with_parent(command);
    #[cfg(not(target_os = "linux"))]
    let _ = command;
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
