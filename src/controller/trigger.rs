//! Why a reconcile ran: the "why did this run?" answer.

use std::fmt;

use crate::queue::{Payload, slot_size};

/// One reason for a reconcile.
///
/// Read from [`Context::triggers`](super::Context::triggers), for logs and
/// metrics, or to choose how much to look at: never to decide what the
/// state should be (the object as cached now says that).
///
/// # Examples
///
/// ```
/// use tend::controller::{Trigger, Triggers};
///
/// /// Audits the whole cloud account only on a periodic resync; a change of
/// /// the object needs only its own resources looked at.
/// fn full_audit(triggers: Triggers) -> bool {
///     triggers.contains(Trigger::Resync)
/// }
///
/// assert!(full_audit(Trigger::Resync.into()));
/// assert!(!full_audit(Trigger::Changed.into()));
/// assert_eq!(Trigger::Owned.to_string(), "owned"); // as logs show it
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trigger {
    /// The primary object was in the initial list (or a late subscription's replay).
    Initial,
    /// The primary object was created or changed.
    Changed,
    /// The primary object was deleted.
    Deleted,
    /// An object this one owns changed (registered with `owns`).
    Owned,
    /// A watched object mapped to this key changed (registered with `watches`).
    Mapped,
    /// Something this key's last reconcile read from a source registered
    /// with [`reads`](super::ControllerBuilder::reads) changed: an object it
    /// got by key (or its absence), an object entering or leaving an index
    /// value it read, a listing or filter it read. Which one is in the
    /// debug event the controller logs when it queues the key.
    Read,
    /// A periodic resync re-checks everything.
    Resync,
    /// The previous reconcile failed (or panicked, or timed out).
    Retry,
    /// The previous reconcile asked for [`Action::Requeue`](super::Action::Requeue)
    /// or [`Action::RequeueAfter`](super::Action::RequeueAfter).
    Requeue,
    /// A trigger from outside the informers asked for it: a key from
    /// [`reconcile_on`](super::ControllerBuilder::reconcile_on), or every key
    /// from [`reconcile_all_on`](super::ControllerBuilder::reconcile_all_on).
    External,
    /// This replica acquired the key's shard (a sharded manager): every
    /// cached key of the shard is re-checked, at the background priority.
    Acquired,
}

impl Trigger {
    const ALL: [Self; 11] = [
        Self::Initial,
        Self::Changed,
        Self::Deleted,
        Self::Owned,
        Self::Mapped,
        Self::Read,
        Self::Resync,
        Self::Retry,
        Self::Requeue,
        Self::External,
        Self::Acquired,
    ];

    /// Every trigger, in declaration order.
    pub(crate) const fn all() -> [Self; Self::COUNT] {
        Self::ALL
    }

    /// Every trigger's name.
    pub(crate) fn names() -> [&'static str; Self::COUNT] {
        Self::ALL.map(Self::name)
    }

    /// How many triggers there are.
    pub(crate) const COUNT: usize = Self::ALL.len();

    /// This trigger's place among all (`0..COUNT`).
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    const fn bit(self) -> u16 {
        1 << self as u8
    }

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Changed => "changed",
            Self::Deleted => "deleted",
            Self::Owned => "owned",
            Self::Mapped => "mapped",
            Self::Read => "read",
            Self::Resync => "resync",
            Self::Retry => "retry",
            Self::Requeue => "requeue",
            Self::External => "external",
            Self::Acquired => "acquired",
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every reason a reconcile ran: several changes to one key are coalesced
/// into one reconcile, so there may be several (`changed+owned`).
///
/// Empty only when the key was added to the controller's queue directly
/// (through [`Controller::queue`](super::Controller::queue)) without any.
///
/// The controller's queue carries them with each key: they are its
/// [`Payload`], merged by set union, so every reason given since the key's
/// last reconcile is reported once by the next.
///
/// # Examples
///
/// ```
/// use tend::Payload;
/// use tend::controller::{Trigger, Triggers};
///
/// let mut triggers = Triggers::from(Trigger::Changed);
/// triggers.merge(Trigger::Owned.into()); // a second add of the key, coalesced
/// assert!(triggers.contains(Trigger::Changed) && triggers.contains(Trigger::Owned));
/// assert_eq!(triggers.iter().collect::<Vec<_>>(), [Trigger::Changed, Trigger::Owned]);
/// assert_eq!(triggers.to_string(), "changed+owned");
/// assert!(Triggers::default().is_empty());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Triggers(u16);

// One bit per trigger; and the queue keeps one slot per key, whose size
// the README's memory per object counts on: `Triggers` must fit its padding.
const _: () = assert!(Trigger::ALL.len() <= u16::BITS as usize);
const _: () = assert!(
    slot_size::<Triggers>() == 32,
    "the queue's slot grew past 32 bytes"
);

impl Triggers {
    /// Whether `trigger` is among the reasons.
    #[must_use]
    pub const fn contains(self, trigger: Trigger) -> bool {
        self.0 & trigger.bit() != 0
    }

    /// Whether no reason is known.
    #[must_use]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The reasons, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Trigger> {
        Trigger::ALL.into_iter().filter(move |t| self.contains(*t))
    }

    pub(crate) const fn with(self, trigger: Trigger) -> Self {
        Self(self.0 | trigger.bit())
    }
}

/// Every reason of both.
impl Payload for Triggers {
    fn merge(&mut self, other: Self) {
        if cfg!(tend_without = "triggers") {
            return;
        }
        self.0 |= other.0;
    }
}

impl From<Trigger> for Triggers {
    fn from(trigger: Trigger) -> Self {
        if cfg!(tend_without = "triggers") {
            return Self::default();
        }
        Self(trigger.bit())
    }
}

impl fmt::Display for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, trigger) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            f.write_str(trigger.name())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Triggers({self})")
    }
}
