//! A named group of tasks that stop together: one per start-up layer.

use std::collections::HashMap;
use std::future::Future;

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use super::ManagerError;

/// How a task of a group ended.
pub(super) type Exit = Result<(), ManagerError>;

/// Tasks of one layer (HTTP, tasks, informers, election, controllers), all
/// observing one token. Owns its tasks: dropping the group aborts them.
pub(super) struct Group {
    set: JoinSet<Exit>,
    names: HashMap<Id, String>,
    token: CancellationToken,
}

impl Group {
    pub(super) fn new() -> Self {
        Self {
            set: JoinSet::new(),
            names: HashMap::new(),
            token: CancellationToken::new(),
        }
    }

    /// The token the group's tasks observe.
    pub(super) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    pub(super) fn spawn(
        &mut self,
        name: impl Into<String>,
        task: impl Future<Output = Exit> + Send + 'static,
    ) {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name.into());
    }

    /// The next task to end, with its name; pending forever when the group
    /// is empty (for use in `select!`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (as `JoinSet::join_next_with_id`).
    pub(super) async fn next_exit(&mut self) -> (String, Exit) {
        if self.set.is_empty() {
            return std::future::pending().await;
        }
        match self.set.join_next_with_id().await {
            Some(Ok((id, exit))) => (self.names.remove(&id).unwrap_or_default(), exit),
            Some(Err(error)) => {
                let name = self.names.remove(&error.id()).unwrap_or_default();
                let exit = Err(ManagerError::TaskFailed {
                    task: name.clone(),
                    source: format!("task ended abnormally: {error}").into(),
                });
                (name, exit)
            }
            None => std::future::pending().await,
        }
    }

    /// Cancels the token and waits for every task; returns the first error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: tasks not yet joined stay in the group.
    pub(super) async fn stop(&mut self) -> Exit {
        self.token.cancel();
        let mut first = Ok(());
        while !self.set.is_empty() {
            let (_, exit) = self.next_exit().await;
            if first.is_ok() {
                first = exit;
            }
        }
        first
    }

    /// Aborts every task and waits until they are gone.
    pub(super) async fn abort(&mut self) {
        self.token.cancel();
        self.set.shutdown().await;
        self.names.clear();
    }
}
