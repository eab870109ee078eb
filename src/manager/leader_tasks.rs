//! Leader-only tasks: started each time this replica wins, stopped (with
//! the grace) when it loses; and the leader gauge, set as the term changes.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ManagerError;
use super::group::Exit;
use super::metrics::Metrics;
use super::runnable::Task;
use crate::client::FencingToken;
use crate::placement::Leadership;

/// Follows the leadership's term for the leader-only tasks.
pub(super) struct LeaderTasks {
    leadership: Leadership,
    tasks: Vec<Task>,
    metrics: Metrics,
    grace: Duration,
    /// The tasks of the term they started in.
    running: Option<Term>,
}

/// Leader-only tasks started in one term.
struct Term {
    /// The term's fencing token.
    token: FencingToken,
    cancel: CancellationToken,
    tasks: JoinSet<Exit>,
}

impl LeaderTasks {
    pub(super) fn new(
        leadership: Leadership,
        tasks: Vec<Task>,
        metrics: Metrics,
        grace: Duration,
    ) -> Self {
        Self {
            leadership,
            tasks,
            metrics,
            grace,
            running: None,
        }
    }

    /// Starts the tasks while leading, stops them while not, until
    /// `cancel` (then stops them); fails as soon as one fails.
    pub(super) async fn run(mut self, cancel: CancellationToken) -> Exit {
        let mut term = self.leadership.term();
        loop {
            let now = *term.borrow_and_update();
            self.metrics
                .set_leader(self.leadership.name(), now.is_some());
            // A term that ended and one that began before this looked: the
            // old term's tasks stop, the new term's start.
            if self.running.as_ref().map(|t| t.token) != now {
                self.stop().await?;
                if let Some(token) = now {
                    self.start(token);
                }
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                changed = term.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                Some(exit) = next_exit(&mut self.running) => exit?,
            }
        }
        self.metrics.set_leader(self.leadership.name(), false);
        self.stop().await
    }

    fn start(&mut self, token: FencingToken) {
        let cancel = CancellationToken::new();
        let mut set = JoinSet::new();
        for task in &mut self.tasks {
            let Some(run) = task.run.start(cancel.child_token()) else {
                continue;
            };
            let name = task.name.clone();
            set.spawn(async move {
                run.await
                    .map_err(|source| ManagerError::TaskFailed { task: name, source })
            });
        }
        self.running = Some(Term {
            token,
            cancel,
            tasks: set,
        });
    }

    /// Cancels the running tasks, waits the grace, aborts what is left.
    async fn stop(&mut self) -> Exit {
        let Some(Term {
            cancel,
            tasks: mut set,
            ..
        }) = self.running.take()
        else {
            return Ok(());
        };
        cancel.cancel();
        let mut first = Ok(());
        let joined = tokio::time::timeout(self.grace, async {
            while let Some(exit) = set.join_next().await {
                if let (Ok(()), Ok(Err(error))) = (&first, exit) {
                    first = Err(error);
                }
            }
        });
        if joined.await.is_err() {
            tracing::warn!(grace = ?self.grace, "leader-only tasks still running after the grace, aborting them");
            set.shutdown().await;
        }
        first
    }
}

/// The next running task's end (pending while none runs).
async fn next_exit(running: &mut Option<Term>) -> Option<Exit> {
    let Some(set) = running
        .as_mut()
        .map(|term| &mut term.tasks)
        .filter(|set| !set.is_empty())
    else {
        return std::future::pending().await;
    };
    match set.join_next().await? {
        Ok(exit) => Some(exit),
        Err(error) => Some(Err(ManagerError::TaskFailed {
            task: String::from("leader-only task"),
            source: format!("task ended abnormally: {error}").into(),
        })),
    }
}
