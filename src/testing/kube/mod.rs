//! A real Kubernetes control plane for tests, as controller-runtime's
//! envtest gives Go controllers: [`ControlPlane`] starts etcd and
//! kube-apiserver as child processes on free 127.0.0.1 ports, with
//! certificates generated for it, waits until the API server's `/readyz`
//! answers 200, and writes an admin kubeconfig (a client certificate in
//! `system:masters`); both processes are killed when it is dropped. Only
//! the API server runs: no scheduler, no controller-manager, so no garbage
//! collection, no namespace deletion, and no pods ever start (objects are
//! just stored).
//!
//! # Binaries
//!
//! The API server is `$TEND_KUBE_APISERVER_BIN` if set, else
//! `kube-apiserver` on the `PATH`; etcd is `$TEND_ETCD_BIN` if set, else
//! `etcd` on the `PATH` (as for `testing::etcd`, and started by the same
//! launcher, but without the `etcd` feature: the launcher talks to etcd
//! over its HTTP gateway).
//! [`ControlPlaneBuilder::apiserver_binary`] and
//! [`ControlPlaneBuilder::etcd_binary`] override both. When one is missing,
//! [`HarnessError::NotInstalled`](crate::testing::HarnessError::NotInstalled)
//! says where it looked and how to get it. With envtest's
//! tools: `setup-envtest use 1.36 -p path` prints a directory holding both
//! (`TEND_KUBE_APISERVER_BIN=$dir/kube-apiserver TEND_ETCD_BIN=$dir/etcd`);
//! or the Kubernetes release binaries, and `apt-get install -y etcd-server`.
//!
//! # Sharing a plane
//!
//! A plane takes seconds to start (about 2.5 s on a small machine). The
//! tests of one binary can share one, [`ControlPlane::shared`], each in a
//! namespace of its own ([`ControlPlane::create_namespace`]) and with a
//! client of its own ([`ControlPlane::client`]): a kube client's
//! connections belong to the runtime it was made on.
//!
//! # Time
//!
//! The harness's own waits (startup, `/readyz`, etcd requests) run on a
//! thread of its own with its own tokio runtime, and are bounded in real
//! time, so they hold under tokio's paused clock (`start_paused`). The
//! clients it hands out are ordinary kube clients whose timeouts are tokio
//! timers, which a paused clock fires early: tests that talk to the API
//! server should not pause the clock.
//!
//! # Processes that outlive a test binary
//!
//! A dropped plane kills both processes, also when a test panics. A static
//! is never dropped, and a test binary killed with SIGKILL runs no drop.
//! So on Linux each process is started with `PR_SET_PDEATHSIG` = SIGKILL
//! from a thread that lives as long as the test process: the kernel kills
//! it when the test process dies, however it dies. On Unix, the shared plane
//! is also killed and its directory removed when the binary exits normally
//! (`atexit`). Elsewhere (macOS after a crash, Windows always) a shared
//! plane's processes keep running; their etcd member is named
//! `tend-kube-{test process id}-{n}`, and the directory
//! `tend-kube-{pid}-{n}-*` in the temporary directory stays.
//!
//! # Compaction and `410 Gone`
//!
//! [`ControlPlane::compact_etcd`] compacts etcd at its current revision. A
//! watch that reaches etcd from an older resource version then ends with
//! a `410 Gone` error event (reason `Expired`). But by default the API
//! server serves watches from its *watch cache*, a window of recent events
//! of each resource that etcd's compaction does not touch. Seen on
//! v1.36.2: a watch from a compacted resource version still replays the
//! events after it from the cache; the cache keeps at least the last 100
//! events, and grows rather than drop one younger than about 75 s, so the
//! watch only gets `410` ("too old resource version") once that event is
//! older than that *and* about 100 newer ones have pushed it out (80 s
//! idle, then 100 writes, in a test here). Two ways to get a `410` at once:
//! - Turn the cache off: [`ControlPlaneBuilder::apiserver_arg`] with
//!   `--watch-cache=false` (or `--watch-cache-sizes=configmaps#0` for one
//!   resource). Then compaction gives `410` for every resource version
//!   older than the compacted revision (the revision itself still works).
//! - [`ControlPlane::restart_apiserver`]: a new cache starts at etcd's
//!   current revision, so a watch from any older resource version gets
//!   `410` ("too old resource version"), compacted or not.
//!
//! # Examples
//!
//! ```no_run
//! use tend::testing::kube::ControlPlane;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let plane = ControlPlane::shared().await?;
//! let client = plane.client().await?;
//! let namespace = plane.create_namespace(&client, "my-test").await?;
//! println!("KUBECONFIG={} kubectl -n {namespace} get all", plane.kubeconfig_path().display());
//! # Ok(()) }
//! ```

mod apiserver;
mod certs;
mod control_plane;
mod faults;
mod kubeconfig;
mod runtime;
mod shared;

pub use self::control_plane::{ControlPlane, ControlPlaneBuilder};
pub(crate) use self::runtime::tie_to_harness_thread;
