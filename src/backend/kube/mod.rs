//! The Kubernetes backend (feature `kube`): any kube-rs resource as a tend
//! object, a [`KubeSource`] over an API server, the [client](crate::client)
//! writing to it, leader election on a `Lease`, and Kubernetes Events.
//!
//! tend provides the runtime; kube-rs is the Kubernetes client: HTTP, auth,
//! kubeconfig, TLS, typed resources and request building are kube-rs's.
//!
//! # Objects: no newtype
//!
//! Every type that implements `kube::Resource` (k8s-openapi's `Pod`,
//! `ConfigMap` …, a `#[derive(CustomResource)]` type, `DynamicObject`) is a
//! tend [`Object`](crate::Object) through one blanket impl, keyed by
//! [`ObjectKey`](crate::ObjectKey) (namespace and name), versioned by its
//! `resourceVersion`, with the API server's generation, finalizers and
//! deletion mark. So `Informer<Pod>` and `Controller<Pod, _>` just work,
//! and the orphan rule never asks for a wrapper.
//!
//! (With the feature on, a type of your own that implements
//! `kube::Resource` cannot also implement `Object` by hand: the blanket
//! impl covers it. Cargo features are unified across a build, so a crate
//! that implements both for one type stops compiling once any crate in the
//! build enables `tend/kube`. Kubernetes types can live in the memory
//! backend too (for unit tests), but there the generation never moves: it
//! is the API server that bumps it, so a `generation_changed` predicate
//! sees no spec change on the memory backend.)
//!
//! # Versions
//!
//! tend re-exports the two crates it is built with, [`kube`](self::kube)
//! (kube-rs 5.0) and [`k8s_openapi`](self::k8s_openapi) (0.29, with the
//! Kubernetes API version feature `v1_36`: types for Kubernetes 1.36, and
//! what they share with older servers). Write `tend::kube::kube::Api` and
//! `tend::kube::k8s_openapi::api::core::v1::Pod` rather than depending on
//! them yourself: the versions then always match tend's, and k8s-openapi's
//! version feature, of which a build may have only one, is chosen once.
//! A crate that needs another Kubernetes API version (or kube-rs's
//! `derive`) depends on the same `kube` and `k8s-openapi` versions itself
//! and enables the features it needs; Cargo unifies them with tend's, so
//! only a *different* k8s-openapi version feature conflicts with `v1_36`.
//!
//! # Revisions
//!
//! tend compares versions to drop stale changes, so it needs them to grow.
//! Kubernetes calls `resourceVersion` opaque, but an etcd-backed API server
//! (every conformant one today) gives etcd's revision in decimal, global to
//! a resource type. tend reads it as a number; a server that gives anything
//! else fails the call with a [`RevisionError`].
//!
//! # Fencing: the local deadline is the guarantee
//!
//! Kubernetes has no multi-object transactions: a write cannot be made
//! conditional on a `Lease` still being held. So the fencing token of a
//! reconcile's client ([`KubeSource::client_fenced_by`]) is checked by the
//! client *just before* each write is sent, not by the server with the
//! write: a write sent an instant before leadership is lost can still
//! land. What keeps two leaders from acting at once is the elector's local
//! deadline — a leader that cannot renew stops acting (and its fenced
//! writes fail with [`ClientError::Fenced`](crate::client::ClientError::Fenced))
//! before the lease could expire for anyone else (so a write must reach
//! the server within the lease minus the renew deadline of the check:
//! keep the client's timeouts below it) — together with the
//! `resourceVersion` precondition every update carries, which refuses a
//! write made from a stale read, whoever makes it.
//!
//! # Leader election
//!
//! [`KubeElection`] implements the manager's
//! [`LeaderElector`](crate::election::LeaderElector) on a
//! `coordination.k8s.io/v1` `Lease`, as client-go's `leaderelection` does
//! (the same record, the same expiry measured on each candidate's own
//! clock, the same release on resign), with the timing of an
//! [`ElectionConfig`](crate::election::ElectionConfig). Its fencing token
//! is the Lease's `resourceVersion` at acquisition, and the candidate
//! itself is the authority for [`KubeSource::client_fenced_by`]
//! (`source.client_fenced_by(&election)`): from the leader's local deadline on,
//! its fenced writes fail with
//! [`ClientError::Fenced`](crate::client::ClientError::Fenced).
//!
//! ```no_run
//! use k8s_openapi::api::apps::v1::Deployment;
//! use tend::kube::{KubeSource, KubeElection};
//! use tend::manager::Manager;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let election = KubeElection::builder(client.clone(), "operators", "shop-operator").build()?;
//! let deployments = KubeSource::<Deployment>::all(client);
//! // Reconcilers write through this client with their context's token.
//! let writes = deployments.client_fenced_by(&election);
//! let manager = Manager::builder().leader_election(election);
//! # drop((writes, manager)); Ok(()) }
//! ```
//!
//! # Events
//!
//! A [`Recorder`] publishes `events.k8s.io/v1` Events about the objects a
//! controller reconciles, as `kubectl describe` shows them; repeats of
//! the same event within a window are counted in one Event's `series`
//! instead of piling up. Hold one in the reconciler: see [`Recorder`].
//!
//! # Read-your-writes
//!
//! The informer's revision is the `resourceVersion` of the watch, so the
//! controller's read-your-writes gate works as on etcd: a reconcile that
//! wrote runs again only once the cache has seen its writes. Deletes are
//! the exception: the gate waits for the revision of the object the
//! server returns from the delete (with finalizers, the marked object; a
//! `Status` answer gives none), which may be its last state before the
//! delete rather than the delete itself.

mod client;
mod election;
mod endpoint;
mod events;
mod membership;
mod names;
mod object;
mod owner;
mod selector;
mod shard_label;
mod source;
mod streaming;

/// k8s-openapi, as tend is built with it (Kubernetes API `v1_36`): use it
/// instead of a dependency of your own (see "Versions").
pub use ::k8s_openapi;
/// kube-rs, as tend is built with it: use it instead of a dependency of
/// your own, so that the versions always match (see "Versions").
pub use ::kube;

pub use self::election::{ElectionBuildError, KubeElection, KubeElectionBuilder};
pub use self::endpoint::KubeResource;
pub use self::events::{
    DEFAULT_CAPACITY, DEFAULT_WINDOW, EmitStats, EventError, EventType, Occurrence, Recorder,
    Reporter,
};
pub use self::membership::{KubeMembership, KubeMembershipBuilder, MembershipBuildError};
pub use self::object::{RevisionError, key_of, parse_revision, revision_of};
pub use self::owner::{controller_of, controller_reference};
pub use self::shard_label::{ShardLabel, ShardLabelError};
pub use self::source::KubeSource;
pub use self::streaming::ListMode;
