//! Why a controller could not be built or run, and the settings it names.

use std::fmt;

#[cfg(doc)]
use super::{ControllerBuilder, Environment, Ownership};
use crate::error::SettingError;
use crate::informer::InformerError;

/// Why a controller could not be built or run.
///
/// # Examples
///
/// A controller whose informer nobody runs never syncs its cache:
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
/// # tend::impl_object!(Item, key: name: String, version: version);
/// # struct Noop;
/// # impl Reconciler<Item> for Noop {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// use std::time::Duration;
/// use tend::controller::{Controller, ControllerError};
/// use tend::memory::MemoryStore;
/// use tend::{CancellationToken, Informer, InformerError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let items = Informer::builder(MemoryStore::<Item>::new("items")).build()?;
/// let controller = Controller::builder("items", &items, Noop)
///     .sync_timeout(Duration::from_secs(5))
///     .build()?;
/// let error = controller.run(CancellationToken::new()).await.unwrap_err();
/// assert!(matches!(error, ControllerError::Informer { source: InformerError::SyncTimeout { .. }, .. }));
/// assert_eq!(error.to_string(), "controller `items` cannot start");
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// The builder (or the environment it runs in) was given a setting
    /// that cannot work.
    #[error("controller `{controller}` is misconfigured: `{setting}` {error}")]
    InvalidConfig {
        /// The controller's name.
        controller: String,
        /// The setting that was wrong.
        setting: ControllerSetting,
        /// What is wrong with it.
        error: SettingError,
    },
    /// The controller runs with fencing tokens (under an
    /// [`Ownership`]), but a client it was given has no fencing authority:
    /// every write through it would fail with
    /// [`ClientError::NoFencing`](crate::client::ClientError::NoFencing).
    #[error(
        "controller `{controller}` runs with fencing tokens, but its client for `{object_type}` cannot be fenced"
    )]
    UnfencedClient {
        /// The controller's name.
        controller: String,
        /// The client's object type.
        object_type: &'static str,
    },
    /// An informer the controller reads failed it: a cache it needs did
    /// not sync in time ([`InformerError::SyncTimeout`]).
    #[error("controller `{controller}` cannot start")]
    Informer {
        /// The controller's name.
        controller: String,
        /// Which source did not sync, and after how long.
        #[source]
        source: InformerError,
    },
}

/// A setting of a [`ControllerBuilder`] (or of the [`Environment`] a
/// controller runs in), as [`ControllerError::InvalidConfig`] names it;
/// displayed as the builder method's name.
///
/// # Examples
///
/// ```
/// # use std::convert::Infallible;
/// # use tend::controller::{Action, Context, Reconciler};
/// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
/// # tend::impl_object!(Item, key: name: String, version: version);
/// # struct Noop;
/// # impl Reconciler<Item> for Noop {
/// #     type Error = Infallible;
/// #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Infallible> { Ok(Action::Done) }
/// # }
/// use tend::controller::{Controller, ControllerError, ControllerSetting};
/// use tend::memory::MemoryStore;
/// use tend::{Informer, SettingError};
///
/// let items = Informer::builder(MemoryStore::<Item>::new("items")).build()?;
/// let built = Controller::builder("", &items, Noop).build();
/// let Err(ControllerError::InvalidConfig { setting, error, .. }) = built else { unreachable!() };
/// assert_eq!((setting, error), (ControllerSetting::Name, SettingError::Empty));
/// assert_eq!(setting.to_string(), "name"); // the builder's argument, or method
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ControllerSetting {
    /// The controller's name.
    Name,
    /// [`ControllerBuilder::resync`].
    Resync,
    /// [`ControllerBuilder::reconcile_timeout`].
    ReconcileTimeout,
    /// [`ControllerBuilder::max_retry_after`].
    MaxRetryAfter,
    /// [`ControllerBuilder::sync_timeout`], or the environment's.
    SyncTimeout,
    /// [`ControllerBuilder::shutdown_grace`].
    ShutdownGrace,
    /// [`ControllerBuilder::read_your_writes`].
    ReadYourWrites,
    /// [`ControllerBuilder::debounce`].
    Debounce,
    /// [`ControllerBuilder::concurrency`].
    Concurrency,
    /// [`ControllerBuilder::hold_while_lagging`].
    HoldWhileLagging,
    /// [`ControllerBuilder::hot_keys`].
    HotKeys,
    /// [`ControllerBuilder::group_metrics`].
    GroupMetrics,
}

impl fmt::Display for ControllerSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Name => "name",
            Self::Resync => "resync",
            Self::ReconcileTimeout => "reconcile_timeout",
            Self::MaxRetryAfter => "max_retry_after",
            Self::SyncTimeout => "sync_timeout",
            Self::ShutdownGrace => "shutdown_grace",
            Self::ReadYourWrites => "read_your_writes",
            Self::Debounce => "debounce",
            Self::Concurrency => "concurrency",
            Self::HoldWhileLagging => "hold_while_lagging",
            Self::HotKeys => "hot_keys",
            Self::GroupMetrics => "group_metrics",
        })
    }
}
