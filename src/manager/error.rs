//! `ManagerError`: why a manager could not be configured or why it
//! stopped; `ManagerSetting`: the builder's settings it names.

use std::fmt;
use std::time::Duration;

use crate::controller::ControllerError;
use crate::election::ElectionError;
use crate::error::{BoxError, SettingError};
use crate::informer::InformerError;
use crate::placement::PlacementError;
use crate::shard::MembershipError;

/// A setting of a [`ManagerBuilder`](super::ManagerBuilder), as [`ManagerError::InvalidConfig`]
/// names it; displayed as the builder method's name.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::SettingError;
/// use tend::manager::{Manager, ManagerError, ManagerSetting};
///
/// let built = Manager::builder().graceful_shutdown_timeout(Duration::ZERO).build();
/// let Err(ManagerError::InvalidConfig { setting, error }) = built else { unreachable!() };
/// assert_eq!((setting, error), (ManagerSetting::GracefulShutdownTimeout, SettingError::Zero));
/// assert_eq!(setting.to_string(), "graceful_shutdown_timeout"); // the builder method's name
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ManagerSetting {
    /// [`ManagerBuilder::graceful_shutdown_timeout`](super::ManagerBuilder::graceful_shutdown_timeout).
    GracefulShutdownTimeout,
    /// [`ManagerBuilder::sync_timeout`](super::ManagerBuilder::sync_timeout).
    SyncTimeout,
    /// [`ManagerBuilder::stuck_key_after`](super::ManagerBuilder::stuck_key_after).
    StuckKeyAfter,
    /// [`ManagerBuilder::stalled_informer_after`](super::ManagerBuilder::stalled_informer_after).
    StalledInformerAfter,
    /// [`ManagerBuilder::not_ready_while_lagging`](super::ManagerBuilder::not_ready_while_lagging).
    NotReadyWhileLagging,
}

impl fmt::Display for ManagerSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::GracefulShutdownTimeout => "graceful_shutdown_timeout",
            Self::SyncTimeout => "sync_timeout",
            Self::StuckKeyAfter => "stuck_key_after",
            Self::StalledInformerAfter => "stalled_informer_after",
            Self::NotReadyWhileLagging => "not_ready_while_lagging",
        })
    }
}

/// Why a manager could not be configured, or why it stopped.
///
/// # Examples
///
/// ```
/// use tend::manager::{Manager, ManagerError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ManagerError> {
/// let mut manager = Manager::builder().without_signals().build()?;
/// manager.add_task("migrate", |_stop| async { Err("disk full".into()) })?;
///
/// // A runnable that cannot be registered is refused at once…
/// let again = manager.add_task("migrate", |_stop| async { Ok(()) });
/// assert!(matches!(again, Err(ManagerError::DuplicateTask { .. })));
/// // … and `run` returns why the manager stopped: here, a failed task.
/// let Err(ManagerError::TaskFailed { task, source }) = manager.run().await else { unreachable!() };
/// assert_eq!((task.as_str(), source.to_string()), ("migrate", "disk full".to_owned()));
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The builder was given a setting that cannot work.
    #[error("manager is misconfigured: `{setting}` {error}")]
    InvalidConfig {
        /// The setting that was wrong.
        setting: ManagerSetting,
        /// What is wrong with it.
        error: SettingError,
    },
    /// Two controllers were registered with one name.
    #[error("a controller named `{controller}` is already registered")]
    DuplicateController {
        /// The repeated name.
        controller: String,
    },
    /// Two tasks were registered with one name.
    #[error("a task named `{task}` is already registered")]
    DuplicateTask {
        /// The repeated name.
        task: String,
    },
    /// [`Manager::informer`](super::Manager::informer) asked for a name registered with another object
    /// type.
    #[error("informer `{informer}` is registered for another object type")]
    InformerType {
        /// The informer's registered name.
        informer: String,
    },
    /// Building or running an informer failed, or (under
    /// [`UnsyncedCaches::Fail`](super::UnsyncedCaches::Fail)) its cache did not sync within the sync
    /// timeout ([`InformerError::SyncTimeout`]).
    #[error("informer `{informer}` failed")]
    Informer {
        /// The informer's registered name.
        informer: String,
        /// What failed.
        #[source]
        source: InformerError,
    },
    /// A controller stopped with an error.
    #[error("controller `{controller}` failed")]
    Controller {
        /// The controller's name.
        controller: String,
        /// What failed.
        #[source]
        source: ControllerError,
    },
    /// A task returned an error or panicked.
    #[error("task `{task}` failed")]
    TaskFailed {
        /// The task's name.
        task: String,
        /// Its error, or the panic.
        #[source]
        source: BoxError,
    },
    /// Campaigning or watching the leadership failed.
    #[error("leader election failed")]
    Election(#[source] ElectionError),
    /// The leadership was lost: leader-only runnables were stopped and
    /// their in-flight reconciles cancelled. The process should exit (see
    /// the [module docs](super)).
    #[error("lost the leadership of `{election}`")]
    LostLeadership {
        /// The election's name.
        election: String,
    },
    /// A runnable placed on the leader, on a manager without leader
    /// election.
    #[error("`{runnable}` runs only on the leader, but the manager has no leader election")]
    NoElection {
        /// The controller's or task's name.
        runnable: String,
    },
    /// A sharded controller on a manager without a shard membership.
    #[error("`{runnable}` is sharded, but the manager has no shard membership")]
    NoMembership {
        /// The controller's name.
        runnable: String,
    },
    /// A task placed [`Placement::Sharded`](crate::placement::Placement::Sharded): tasks have no keys to shard.
    #[error("task `{task}` cannot be sharded")]
    ShardedTask {
        /// The task's name.
        task: String,
    },
    /// [`Manager::add_controller`](super::Manager::add_controller) on a manager with a membership and no
    /// election: its default placement would reconcile every key on every
    /// replica. Say where it runs with [`Manager::add_controller_on`](super::Manager::add_controller_on).
    #[error("controller `{controller}` is not sharded, but the manager is")]
    UnshardedController {
        /// The controller's name.
        controller: String,
    },
    /// A leader-only or sharded controller was given a client that cannot
    /// be fenced: every write through it would fail with
    /// [`ClientError::NoFencing`](crate::client::ClientError::NoFencing).
    /// Give it a client made with a fencing authority (on memory and etcd,
    /// `client_fenced_by`).
    #[error(
        "controller `{controller}` runs with fencing tokens, but its client for `{object_type}` cannot be fenced"
    )]
    UnfencedClient {
        /// The controller's name.
        controller: String,
        /// The client's object type.
        object_type: &'static str,
    },
    /// Joining the membership or acquiring a shard failed.
    #[error("sharding failed")]
    Membership(#[source] MembershipError),
    /// The membership ended (it expired, or was taken away): sharded
    /// reconciles were stopped at once. The process should exit, as after a
    /// lost leadership.
    #[error("lost the membership of group `{group}`")]
    LostMembership {
        /// The group's name.
        group: String,
    },
    /// A controller added through a [`ManagerHandle`](super::ManagerHandle) reads an informer
    /// the manager does not run: get every informer it reads from
    /// [`ManagerHandle::informer`](super::ManagerHandle::informer) (again, after the last controller that
    /// used it was removed).
    #[error("controller `{controller}` reads an informer this manager does not run")]
    UnregisteredInformer {
        /// The controller's name.
        controller: String,
    },
    /// No runnable of that name is registered with the running manager.
    #[error("no controller named `{controller}` is running")]
    UnknownController {
        /// The name asked for.
        controller: String,
    },
    /// The manager is not running (any more): a handle's call could not be
    /// carried out.
    #[error("the manager is not running")]
    NotRunning,
    /// The signal handlers could not be installed.
    #[error("installing the signal handlers failed")]
    Signals(#[source] std::io::Error),
    /// The HTTP address could not be bound or served.
    #[error("the HTTP endpoint failed")]
    Http(#[source] std::io::Error),
    /// Tasks were still running when the graceful-shutdown timeout passed;
    /// they were aborted.
    #[error("tasks were still running after the graceful-shutdown timeout of {timeout:?}")]
    ShutdownTimeout {
        /// The timeout.
        timeout: Duration,
    },
    /// A second signal forced the shutdown; running tasks were aborted.
    #[error("shutdown forced by a second signal")]
    ForcedShutdown,
}

impl From<PlacementError> for ManagerError {
    fn from(error: PlacementError) -> Self {
        match error {
            PlacementError::Election(error) => Self::Election(error),
            PlacementError::LostLeadership { election } => Self::LostLeadership { election },
            PlacementError::Membership(error) => Self::Membership(error),
            PlacementError::LostMembership { group } => Self::LostMembership { group },
        }
    }
}
