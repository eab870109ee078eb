//! The boxed error of a backend's underlying system, and its chain for logs.

use std::error::Error as StdError;

/// A boxed error from a source's underlying system.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `error: source: source…` for logs.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// Why a setting's value cannot work: the typed reason inside every
/// configuration error ([`ControllerError::InvalidConfig`](crate::controller::ControllerError::InvalidConfig),
/// [`ManagerError::InvalidConfig`](crate::manager::ManagerError::InvalidConfig),
/// [`InformerError::InvalidOption`](crate::InformerError::InvalidOption)),
/// beside the setting it is about.
///
/// ```
/// use std::time::Duration;
/// use tend::controller::{ControllerError, ControllerSetting};
/// use tend::SettingError;
/// # use tend::controller::{Action, Context, Controller, Reconciler};
/// # #[derive(Clone, Debug)] struct Item { name: String, version: tend::Revision }
/// # tend::impl_object!(Item, key: name: String, version: version);
/// # struct Noop;
/// # impl Reconciler<Item> for Noop {
/// #     type Error = std::convert::Infallible;
/// #     async fn reconcile(&self, _: Context<Item>) -> Result<Action, Self::Error> { Ok(Action::Done) }
/// # }
/// # let store = tend::memory::MemoryStore::<Item>::new("items");
/// # let informer = tend::Informer::builder(store).build().unwrap();
/// let built = Controller::builder("items", &informer, Noop)
///     .reconcile_timeout(Duration::ZERO)
///     .build();
/// assert!(matches!(
///     built,
///     Err(ControllerError::InvalidConfig {
///         setting: ControllerSetting::ReconcileTimeout,
///         error: SettingError::Zero,
///         ..
///     })
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingError {
    /// It is empty (a name).
    #[error("is empty")]
    Empty,
    /// It is zero, which cannot work (a zero timeout, period or bound).
    #[error("is zero")]
    Zero,
    /// It is above the largest value that works.
    #[error("is above its maximum of {max}")]
    AboveMax {
        /// The largest value that works.
        max: u64,
    },
    /// A range whose start is above its end (an initial delay above the
    /// maximum).
    #[error("starts above its maximum")]
    Inverted,
    /// It does nothing without another setting, which is missing.
    #[error("needs `{setting}` set too")]
    Needs {
        /// The missing setting.
        setting: &'static str,
    },
}
