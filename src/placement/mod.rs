//! Where a runnable runs: on every replica, only on the leader, or on the
//! replica that owns its key's shard.
//!
//! A controller does not know where it runs: it is handed an
//! [`Ownership`](crate::controller::Ownership) in its
//! [`Environment`](crate::controller::Environment), which says which keys
//! it may reconcile now and with which fencing token. This module holds
//! the two things that decide it:
//!
//! - [`Leadership`] follows a [`LeaderElector`](crate::election::LeaderElector): while this replica leads,
//!   its ownership owns every key with the leader's token; while it stands
//!   by, a leader-only controller is warm (subscribed, synced, its queue
//!   filled) and hands nothing out, so a won election starts reconciling at
//!   once, with no replay.
//! - [`Sharding`] follows a [`Membership`](crate::shard::Membership): it computes the
//!   [`Assignment`](crate::shard::Assignment), acquires the shards assigned
//!   here, hands over (drains, then releases) those that move away, and its
//!   ownership owns the keys of the shards it holds, each with its shard's
//!   token. Keys of other shards are not queued; a gained shard's cached
//!   keys (and recent deletions) are queued when it is acquired.
//!
//! The [`Manager`](crate::manager::Manager) builds both from its settings and
//! hands each runnable the one its [`Placement`] names; a program or a test
//! can run either itself (see [`Environment`](crate::controller::Environment)).

mod follower;
mod kept;
mod leadership;
mod sharding;

pub use self::leadership::Leadership;
pub use self::sharding::{OwnedShard, ShardReport, Sharding, ShardingObserver};

use crate::election::ElectionError;
use crate::shard::MembershipError;

/// Where a runnable (a controller or a task) registered with a
/// [`Manager`](crate::manager::Manager) runs.
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
/// use tend::manager::{Manager, ManagerError};
/// use tend::memory::{MemoryElectionGroup, MemoryStore};
/// use tend::placement::Placement;
/// use tend::Informer;
///
/// let election = MemoryElectionGroup::new("items");
/// let mut manager = Manager::builder().leader_election(election.candidate()).without_signals().build()?;
/// let store = MemoryStore::<Item>::new("items");
/// let items = manager.informer("items", || Informer::builder(store.clone()).build())?;
/// let gc = manager.controller("items-gc", &items, Noop).build()?;
/// manager.add_controller_on(gc, Placement::Leader)?; // a warm standby elsewhere
///
/// let main = manager.controller("items", &items, Noop).build()?;
/// let refused = manager.add_controller_on(main, Placement::Sharded);
/// assert!(matches!(refused, Err(ManagerError::NoMembership { .. }))); // no `sharding`
/// assert_eq!(Placement::Leader.as_str(), "leader"); // as metrics show it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placement {
    /// On every replica, always, with no fencing token.
    Everywhere,
    /// Only on the replica that leads the manager's election, with the
    /// leader's fencing token. A leader-only controller stands by warm on
    /// the other replicas; a leader-only task starts when this replica wins
    /// and is stopped when it loses.
    Leader,
    /// Each key on the replica that owns its shard in the manager's
    /// membership, with the shard's fencing token (controllers only).
    Sharded,
}

impl Placement {
    /// The placement's name, as metrics and `/debug` show it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Everywhere => "everywhere",
            Self::Leader => "leader",
            Self::Sharded => "sharded",
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a [`Leadership`] or a [`Sharding`] stopped.
///
/// A [`Manager`](crate::manager::Manager) turns it into the matching
/// [`ManagerError`](crate::manager::ManagerError) (`From`).
///
/// # Examples
///
/// ```
/// use tend::memory::MemoryElectionGroup;
/// use tend::placement::{Leadership, PlacementError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let election = MemoryElectionGroup::new("operator");
/// let leadership = Leadership::new(election.candidate());
/// let running = tokio::spawn(leadership.clone().run(tend::CancellationToken::new()));
/// leadership.term().wait_for(Option::is_some).await.unwrap();
/// election.depose(); // as an expired lease
/// let error = running.await.unwrap().unwrap_err();
/// assert!(matches!(&error, PlacementError::LostLeadership { election } if election == "operator"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementError {
    /// Campaigning or watching the leadership failed.
    #[error("leader election failed")]
    Election(#[source] ElectionError),
    /// The leadership was lost: every leader-only reconcile was cancelled
    /// at once.
    #[error("lost the leadership of `{election}`")]
    LostLeadership {
        /// The election's name.
        election: String,
    },
    /// Joining the membership or acquiring a shard failed.
    #[error("sharding failed")]
    Membership(#[source] MembershipError),
    /// The membership ended (it expired, or was taken away): every sharded
    /// reconcile was cancelled at once.
    #[error("lost the membership of group `{group}`")]
    LostMembership {
        /// The group's name.
        group: String,
    },
}
