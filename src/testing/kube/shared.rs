//! One control plane for every test of a test binary, torn down when the
//! binary exits.

use tokio::sync::OnceCell;

use super::ControlPlane;
use crate::testing::HarnessError;

/// The shared plane, once started.
static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

impl ControlPlane {
    /// The control plane shared by every test of this test binary, started
    /// by the first call (with the default settings). Starting a plane
    /// takes seconds; sharing one, each test in a namespace of its own
    /// ([`create_namespace`](Self::create_namespace)), saves that per test.
    ///
    /// Each `#[tokio::test]` runs its own runtime, and may call this from
    /// any of them: nothing of the plane belongs to the runtime that
    /// started it. Ask for a [`client`](Self::client) in each test.
    /// Tests that kill or restart the API server, or compact etcd, should
    /// start a plane of their own: the others would see it.
    ///
    /// A static is never dropped: on Unix the plane is killed and its
    /// directory removed when the binary exits normally, and on Linux its
    /// processes are killed when it dies in any other way (see the
    /// [module docs](super)).
    ///
    /// # Errors
    ///
    /// As [`ControlPlane::start`]; a failed start is tried again by the
    /// next call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a start that is dropped is taken up by the next call.
    pub async fn shared() -> Result<&'static Self, HarnessError> {
        SHARED
            .get_or_try_init(|| async {
                let plane = Self::start().await?;
                tear_down_at_exit();
                Ok(plane)
            })
            .await
    }
}

/// Has the shared plane killed and its directory removed when the process
/// exits normally (`exit`, or returning from `main`: what a test binary
/// does).
#[cfg(unix)]
#[allow(unsafe_code)] // `atexit`; see the SAFETY comment.
fn tear_down_at_exit() {
    extern "C" fn tear_down() {
        if let Some(plane) = SHARED.get() {
            plane.inner.try_kill();
            let _ = std::fs::remove_dir_all(plane.dir());
        }
    }
    // SAFETY: `atexit` only records the function; `tear_down` cannot
    // unwind (it only takes locks without waiting, kills, and removes
    // files, ignoring errors), and touches nothing that exit has torn down
    // (statics stay until the process ends).
    unsafe {
        libc::atexit(tear_down);
    }
}

/// No hook at exit here: the processes outlive the test binary.
#[cfg(not(unix))]
fn tear_down_at_exit() {}
