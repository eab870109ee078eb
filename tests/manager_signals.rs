//! The manager's real SIGTERM/SIGINT path: each test runs its own test
//! binary again as a child process (selected by an environment variable)
//! with a manager on the default OS signals, sends it real signals with
//! `kill`, and checks how it stopped. Real processes take real time: every
//! wait is bounded in wall-clock time.
#![cfg(unix)]

#[path = "support/widgets.rs"]
mod widgets;

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tend::controller::{Action, Context, Reconciler};
use tend::manager::{Manager, ManagerError};
use tend::{BoxError, Informer};

use widgets::{Widget, widgets};

/// Set in the child: which test's child part to run.
const CHILD: &str = "TEND_SIGNALS_CHILD";
/// Generous bounds for a loaded machine; a healthy run takes milliseconds.
const START_LIMIT: Duration = Duration::from_secs(60);
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// Says `ready` once it reconciled a widget: the manager is running, and its
/// signal handlers are installed (they are before any task starts).
struct Announce;

impl Reconciler<Widget> for Announce {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<Widget>) -> Result<Action, Infallible> {
        println!("[child] ready: reconciled {}", ctx.key());
        Ok(Action::Done)
    }
}

/// The child: a manager with a controller and a task that reports its stop,
/// plus, if `stubborn`, a task that ignores its stop. Returns how `run` ended.
fn child(stubborn: bool) -> Result<(), ManagerError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = widgets(&["a"]);
        let mut manager = Manager::builder()
            .graceful_shutdown_timeout(Duration::from_secs(600))
            .build()?;
        let informer = manager.informer("widgets", || Informer::builder(store.clone()).build())?;
        let controller = manager
            .controller("widgets", &informer, Announce)
            .build()
            .expect("valid");
        manager.add_controller(controller)?;
        manager.add_task("reporter", |stop| async move {
            stop.cancelled().await;
            println!("[child] stopping: the task saw the stop");
            Ok::<(), BoxError>(())
        })?;
        if stubborn {
            manager.add_task("stubborn", |_| std::future::pending())?;
        }
        manager.run().await
    })
}

/// A running child, its output lines arriving on a channel.
struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Child {
    /// Runs this binary's `test` alone, as the child.
    fn start(test: &str) -> Self {
        let mut process = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD, test)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let stdout = process.stdout.take().expect("piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            process,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (bounded) for an output line with `[child] {prefix}` (libtest
    /// may have written the test's name before it on the same line).
    fn wait_for(&mut self, prefix: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(&format!("[child] {prefix}"));
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    panic!("no line `{prefix}…` within {limit:?}; saw {:?}", self.seen);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the child ended before `{prefix}…`; saw {:?}", self.seen);
                }
            }
        }
    }

    /// Sends `signal` (a name `kill -s` knows) to the child.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.process.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {signal} failed");
    }

    /// Waits (bounded) for the child to exit; returns its status.
    fn exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.process.try_wait().expect("wait") {
                // The rest of its output.
                self.seen.extend(self.lines.iter());
                return status;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "the child did not exit within {limit:?}; saw {:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// Whether the child said `[child] {said}`.
    fn saw(&self, said: &str) -> bool {
        let said = format!("[child] {said}");
        self.seen.iter().any(|line| line.ends_with(&said))
    }
}

/// In the child, runs `test`'s child part and returns true.
fn as_child(test: &str, stubborn: bool) -> bool {
    if std::env::var(CHILD).as_deref() != Ok(test) {
        return false;
    }
    let ended = child(stubborn);
    if stubborn {
        assert!(
            matches!(ended, Err(ManagerError::ForcedShutdown)),
            "{ended:?}"
        );
        println!("[child] forced");
    } else {
        ended.expect("a clean shutdown");
        println!("[child] stopped cleanly");
    }
    true
}

/// The parent: starts the child, signals it once it runs, and checks that
/// it stopped gracefully and exited 0 in time.
fn assert_graceful_stop_on(test: &str, signal: &str) {
    let mut child = Child::start(test);
    child.wait_for("ready", START_LIMIT);
    let sent = Instant::now();
    child.signal(signal);
    let status = child.exit(STOP_LIMIT);
    assert!(status.success(), "{status}; saw {:?}", child.seen);
    assert!(
        child.saw("stopping: the task saw the stop") && child.saw("stopped cleanly"),
        "not a graceful stop: {:?}",
        child.seen
    );
    assert!(sent.elapsed() < STOP_LIMIT);
}

#[test]
fn sigterm_stops_the_manager_gracefully_and_the_process_exits_0() {
    const TEST: &str = "sigterm_stops_the_manager_gracefully_and_the_process_exits_0";
    if !as_child(TEST, false) {
        assert_graceful_stop_on(TEST, "TERM");
    }
}

#[test]
fn sigint_stops_the_manager_gracefully_and_the_process_exits_0() {
    const TEST: &str = "sigint_stops_the_manager_gracefully_and_the_process_exits_0";
    if !as_child(TEST, false) {
        assert_graceful_stop_on(TEST, "INT");
    }
}

#[test]
fn a_second_signal_forces_the_shutdown_of_a_task_that_ignores_its_stop() {
    const TEST: &str = "a_second_signal_forces_the_shutdown_of_a_task_that_ignores_its_stop";
    if as_child(TEST, true) {
        return;
    }
    let mut child = Child::start(TEST);
    child.wait_for("ready", START_LIMIT);
    child.signal("TERM");
    // The graceful stop has begun; a stubborn task holds it up (for the
    // 600 s grace) until the second signal.
    child.wait_for("stopping", STOP_LIMIT);
    child.signal("INT");
    let status = child.exit(STOP_LIMIT);
    assert!(status.success(), "{status}; saw {:?}", child.seen);
    assert!(child.saw("forced"), "{:?}", child.seen);
}
