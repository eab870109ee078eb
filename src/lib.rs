//! tend: a controller runtime for level-triggered reconciliation loops.
//!
//! A reconciliation loop declares a destination and stays responsible for it:
//! **observe** the actual state, **compare** it with the desired state, **act**
//! to close the gap, and repeat forever. Because every decision is taken from
//! the state as it is now (not from the event that woke the loop), a dropped or
//! duplicated event, a crash or a restart changes nothing: the next reconcile
//! sees the world as it is and fixes it.
//!
//! The crate is built from small parts, each in its own module:
//!
//! - [`Object`] and [`Source`]: what a controller observes and where it
//!   comes from, with the embedded [`memory`] backend (revisions, optimistic
//!   concurrency, watch history, compaction, fault injection) and the
//!   list-only [`poll`] backend.
//! - [`client`]: the [`Client`](client::Client) that reads and writes a
//!   source's objects, the same on every backend, with optimistic
//!   concurrency, fencing and read-modify-write helpers.
//! - [`Informer`]: lists and watches a source, keeps the shared [`Cache`]
//!   cache up to date and delivers [`Event`]s to subscribers.
//! - [`WorkQueue`]: the deduplicating, rate-limited, prioritised queue of keys
//!   that every controller runs on.
//! - [`rate_limit`]: per-key backoff and overall rate limits for retries.
//! - [`testing`]: a harness that runs your controllers in tests until they
//!   settle.
//! - [`controller`]: the [`Reconciler`](controller::Reconciler) trait you
//!   implement and the [`Controller`](controller::Controller) that runs it.
//! - [`manager`]: the [`Manager`](manager::Manager) that runs several
//!   controllers with shared informers, leader election, Prometheus metrics
//!   and health endpoints (`/metrics`, `/healthz`, `/readyz` with the `http`
//!   feature, on by default).
//! - [`shard`]: the stable mapping of keys to shards and of shards to
//!   replicas, for running one controller on several replicas.
//! - [`dir`] (feature `dir`): a source over a directory of JSON (or any
//!   decodable) files, one object per file, watched with OS file
//!   notifications: the desired state of a GitOps tool.
//! - [`etcd`] (feature `etcd`): a source over a key prefix in etcd, writes
//!   with optimistic concurrency and fencing, and leader election on an
//!   etcd lease; [`testing::etcd`] starts a real etcd for tests.
//! - [`kube`] (feature `kube`): Kubernetes as a backend over kube-rs: every
//!   kube-rs resource type is an [`Object`] as it is (no newtype), a source
//!   over an API server, the client with `resourceVersion` preconditions,
//!   status writes and server-side apply; [`testing::kube`] starts a real
//!   API server and etcd for tests, as envtest does.
//! - [`webhook`] (feature `webhook`): validating, mutating and conversion
//!   webhooks for the Kubernetes API server, served over TLS with
//!   certificates reloaded as they rotate.
//!
//! # From nothing to a running controller
//!
//! Eight steps, each with a doctest; from step 5 on, each is a whole
//! running program. The
//! lights of a house are the example: each light has a wish (`want_on`)
//! and a state (`is_on`), and the controller makes the state follow the
//! wish.
//!
//! ## 1. The loop
//!
//! A controller runs one function, the reconcile, for one key at a time: it
//! is handed the *current* desired object (read from a cache, not from the
//! event that woke it), observes the actual state, compares, and acts. It
//! runs when the object changes, when something it owns changes, on a
//! periodic resync, and again with backoff when it fails. Because it reads
//! the world afresh each time, it must be idempotent: running it twice, or
//! after a crash halfway through, leaves the same result.
//!
//! The shape of every reconcile, without tend (a count of pods):
//!
//! ```
//! use std::cmp::Ordering;
//!
//! fn reconcile(desired: u32, actual: &mut u32) -> &'static str {
//!     match (*actual).cmp(&desired) {           // observe, compare
//!         Ordering::Less => { *actual += 1; "create one" } // act on the gap
//!         Ordering::Greater => { *actual -= 1; "delete one" }
//!         Ordering::Equal => "nothing to do",
//!     }
//! }
//!
//! let mut pods = 1;
//! while reconcile(3, &mut pods) != "nothing to do" {} // run until it holds
//! assert_eq!(pods, 3);
//! assert_eq!(reconcile(3, &mut pods), "nothing to do"); // again: no change
//! ```
//!
//! ## 2. Objects and sources
//!
//! What a controller observes is an [`Object`]: a `Clone` type with a key
//! (its identity) and a version (the [`Revision`] of the write that produced
//! it, set by the backend). [`impl_object!`] implements it for the common
//! case. Objects live in a [`Source`], which lists them and watches their
//! changes: the embedded [`memory::MemoryStore`] (a small etcd for one type),
//! [`poll::PollSource`] for systems that can only be listed, [`dir`] for a
//! directory of files, [`etcd`] for a real cluster, or your own
//! implementation of [`Source`].
//!
//! ```
//! use tend::Revision;
//! use tend::memory::MemoryStore;
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! tend::impl_object!(Light, key: room: String, version: version);
//!
//! let lights = MemoryStore::<Light>::new("lights");
//! assert!(lights.is_empty());
//! ```
//!
//! ## 3. The reconciler
//!
//! Your logic is a [`Reconciler`](controller::Reconciler): one `async fn`
//! from a [`Context`](controller::Context) (the key, the cached object or
//! `None` once it is deleted, the caches of other informers, why it runs) to
//! an [`Action`](controller::Action) (done, or run again later), or your
//! own error (retried with backoff).
//!
//! ```
//! # use tend::Revision;
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! use tend::client::ClientError;
//! use tend::controller::{Action, Context, Reconciler};
//!
//! struct Switch;
//!
//! impl Reconciler<Light> for Switch {
//!     type Error = ClientError;
//!
//!     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, ClientError> {
//!         // Observe.
//!         let Some(light) = ctx.object() else {
//!             return Ok(Action::Done); // deleted: nothing to switch
//!         };
//!         // Compare.
//!         if light.want_on == light.is_on {
//!             return Ok(Action::Done);
//!         }
//!         // Act: a conflict (someone wrote in between) is an error, so
//!         // the key is retried and the next reconcile sees the new state.
//!         // Through the reconcile's own client (given to the controller's
//!         // builder): fenced under leader election, and the key's next
//!         // reconcile waits for the cache to show the write.
//!         let lights = ctx.client::<Light>().expect("the builder was given a client of lights");
//!         let switched = Light { is_on: light.want_on, ..Light::clone(light) };
//!         lights.update(switched).await?;
//!         Ok(Action::Done)
//!     }
//! }
//! ```
//!
//! ## 4. The client
//!
//! Everything writes through a [`Client`](client::Client), the same type on
//! every backend: live `get` and `list`, `create`, an optimistic `update`
//! (refused when the object changed since it was read), `delete`, and
//! `modify` / `create_or_update`, which re-read and retry on conflict.
//!
//! ```
//! # use tend::Revision;
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! use tend::client::Effect;
//! use tend::memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tend::client::ClientError> {
//! let lights = MemoryStore::<Light>::new("lights").client();
//! let hall = Light { room: "hall".into(), want_on: false, is_on: false, version: Revision::ZERO };
//! let hall = lights.create(hall).await?;
//! assert_ne!(hall.version, Revision::ZERO); // set by the backend
//! let wished = lights.modify(&"hall".to_owned(), |light| light.want_on = true).await?;
//! assert_eq!(wished.effect, Effect::Updated);
//! assert!(lights.update(hall).await.unwrap_err().is_conflict()); // a stale read
//! # Ok(()) }
//! ```
//!
//! ## 5. A running controller
//!
//! An [`Informer`] lists and watches a source into a shared cache (a
//! [`Cache`]); a [`Controller`](controller::Controller) subscribes to it,
//! queues keys in a [`WorkQueue`] and runs the reconciler on workers.
//! `owns` and `watches` add secondary informers whose changes map to
//! primary keys (a pod to its ReplicaSet). Both run until their token is
//! cancelled.
//!
//! ```
//! # use tend::client::ClientError;
//! # use tend::controller::{Action, Context, Reconciler};
//! # use tend::Revision;
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! # struct Switch;
//! # impl Reconciler<Light> for Switch {
//! #     type Error = ClientError;
//! #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, ClientError> {
//! #         if let Some(l) = ctx.object().filter(|l| l.want_on != l.is_on) {
//! #             let lights = ctx.client::<Light>().expect("a client");
//! #             lights.update(Light { is_on: l.want_on, ..Light::clone(l) }).await?;
//! #         }
//! #         Ok(Action::Done)
//! #     }
//! # }
//! use std::time::Duration;
//! use tend::controller::Controller;
//! use tend::memory::MemoryStore;
//! use tend::{CancellationToken, Informer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new("lights");
//! let informer = Informer::builder(store.clone()).build()?;
//! let controller = Controller::builder("switch", &informer, Switch)
//!     .client(store.client()) // what `ctx.client::<Light>()` hands each reconcile
//!     .resync(Duration::from_secs(600)) // re-check every light now and then
//!     .build()?;
//!
//! let stop = CancellationToken::new();
//! let watching = tokio::spawn({
//!     let stop = stop.clone();
//!     async move { informer.run(stop).await }
//! });
//! let running = tokio::spawn(controller.run(stop.clone()));
//!
//! let hall = Light { room: "hall".into(), want_on: true, is_on: false, version: Revision::ZERO };
//! store.client().create(hall).await?;
//! let lit = async {
//!     while !store.get(&"hall".to_owned()).is_some_and(|l| l.is_on) {
//!         tokio::task::yield_now().await;
//!     }
//! };
//! tokio::time::timeout(Duration::from_secs(10), lit).await?;
//! stop.cancel();
//! running.await??;
//! watching.await??;
//! # Ok(()) }
//! ```
//!
//! ## 6. The manager
//!
//! A process usually runs several controllers. A
//! [`Manager`](manager::Manager) shares one informer per source between
//! them, starts informers before controllers and stops them after, handles
//! SIGTERM and SIGINT, runs your own long-lived tasks, gates controllers on
//! leader election, and serves Prometheus metrics and health endpoints
//! (`http_address`, feature `http`).
//!
//! ```
//! # use tend::client::ClientError;
//! # use tend::controller::{Action, Context, Reconciler};
//! # use tend::memory::MemoryStore;
//! # use tend::{Informer, Revision};
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! # struct Switch;
//! # impl Reconciler<Light> for Switch {
//! #     type Error = ClientError;
//! #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, ClientError> {
//! #         if let Some(l) = ctx.object().filter(|l| l.want_on != l.is_on) {
//! #             let lights = ctx.client::<Light>().expect("a client");
//! #             lights.update(Light { is_on: l.want_on, ..Light::clone(l) }).await?;
//! #         }
//! #         Ok(Action::Done)
//! #     }
//! # }
//! use tend::manager::Manager;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new("lights");
//! let mut manager = Manager::builder().build()?;
//! let lights = manager.informer("lights", || Informer::builder(store.clone()).build())?;
//! let switch = manager.controller("switch", &lights, Switch).client(store.client()).build()?;
//! manager.add_controller(switch)?;
//!
//! // A task beside the controllers: here, it wishes the hall lit and stops
//! // the manager once it is (a real one would run until SIGTERM).
//! let stop = manager.shutdown_token();
//! let client = store.client();
//! manager.add_task("tenant", move |_cancel| async move {
//!     let hall = Light { room: "hall".into(), want_on: true, is_on: false, version: Revision::ZERO };
//!     client.create(hall).await?;
//!     let lit = async {
//!         while !client.get(&"hall".to_owned()).await?.is_some_and(|l| l.is_on) {
//!             tokio::task::yield_now().await;
//!         }
//!         Ok::<_, tend::client::ClientError>(())
//!     };
//!     let result = tokio::time::timeout(std::time::Duration::from_secs(10), lit).await;
//!     stop.cancel();
//!     Ok(result??) // a task's error stops the manager with it
//! })?;
//! manager.run().await?; // returns once stopped, every task ended
//! # Ok(()) }
//! ```
//!
//! ## 7. Testing with the harness
//!
//! A [`testing::Harness`] runs informers and controllers and
//! [`settle`](testing::Harness::settle)s: it waits until nothing is left to
//! do. Under tokio's paused clock backoffs and resyncs of minutes take no
//! real time, and a test reads: write the desired state, settle, assert the
//! actual state.
//!
//! ```
//! # use tend::client::ClientError;
//! # use tend::controller::{Action, Context, Reconciler};
//! # use tend::Revision;
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Light { room: String, want_on: bool, is_on: bool, version: Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! # struct Switch;
//! # impl Reconciler<Light> for Switch {
//! #     type Error = ClientError;
//! #     async fn reconcile(&self, ctx: Context<Light>) -> Result<Action, ClientError> {
//! #         if let Some(l) = ctx.object().filter(|l| l.want_on != l.is_on) {
//! #             let lights = ctx.client::<Light>().expect("a client");
//! #             lights.update(Light { is_on: l.want_on, ..Light::clone(l) }).await?;
//! #         }
//! #         Ok(Action::Done)
//! #     }
//! # }
//! use std::time::Duration;
//! use tend::controller::Controller;
//! use tend::memory::MemoryStore;
//! use tend::testing::Harness;
//! use tend::Informer;
//!
//! // In a test: #[tokio::test(start_paused = true)]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new("lights");
//! let informer = Informer::builder(store.clone()).build()?;
//! let mut harness = Harness::new();
//! harness.informer(&informer);
//! harness.controller(Controller::builder("switch", &informer, Switch).client(store.client()).build()?);
//!
//! let hall = Light { room: "hall".into(), want_on: true, is_on: false, version: Revision::ZERO };
//! store.client().create(hall).await?;
//! harness.settle(Duration::from_secs(60)).await?;
//! assert!(store.get(&"hall".to_owned()).unwrap().is_on);
//! harness.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! ## 8. Moving to etcd
//!
//! When one process is not enough, the objects move to etcd (feature
//! `etcd`) and replicas elect a leader; the reconciler does not change.
//! Objects are stored as JSON, so the type gains serde's derives; the
//! source replaces the memory store, its client the memory client, and the
//! election gates the controllers (only the leader reconciles, and its
//! writes can be fenced by its token: see [`client`]).
//!
//! ```no_run
//! # #[cfg(feature = "etcd")]
//! # mod etcd_step {
//! # use tend::client::ClientError;
//! # use tend::controller::{Action, Context, Reconciler};
//! # #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
//! # struct Light { room: String, want_on: bool, is_on: bool, #[serde(skip)] version: tend::Revision }
//! # tend::impl_object!(Light, key: room: String, version: version);
//! # struct Switch;
//! # impl Reconciler<Light> for Switch {
//! #     type Error = ClientError;
//! #     async fn reconcile(&self, _: Context<Light>) -> Result<Action, ClientError> { Ok(Action::Done) }
//! # }
//! use tend::Informer;
//! use tend::etcd::{EtcdElection, EtcdSource};
//! use tend::manager::Manager;
//!
//! async fn run() -> Result<(), Box<dyn std::error::Error>> {
//!     let etcd = etcd_client::Client::connect(["127.0.0.1:2379"], None).await?;
//!     let source = EtcdSource::<Light>::builder("lights", etcd.clone(), "/lights/").build();
//!     let election = EtcdElection::builder(etcd, "lights-operator").identity("replica-1").build()?;
//!     let mut manager = Manager::builder().leader_election(election).build()?;
//!     let lights = manager.informer("lights", || Informer::builder(source.clone()).build())?;
//!     let switch = manager.controller("switch", &lights, Switch).client(source.client());
//!     manager.add_controller(switch.build()?)?;
//!     manager.run().await?; // until SIGTERM; reconciles only while leading
//!     Ok(())
//! }
//! # }
//! ```
//!
//! `tend::testing::etcd` (feature `etcd`) starts a real etcd server for
//! tests, and `examples/etcd_replicaset.rs` runs three replicas through a
//! leader's death.

// The crate docs link every feature's module: a build without one of the
// features cannot resolve those links (docs.rs and CI build with them all).
#![cfg_attr(
    not(all(
        feature = "dir",
        feature = "etcd",
        feature = "kube",
        feature = "webhook"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

/// The README's code blocks, compiled and run as doctests so that they
/// cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod backend;
pub mod client;
pub mod controller;
pub mod election;
mod error;
#[cfg(test)]
mod fuzz;
pub mod gc;
mod informer;
mod key;
pub mod manager;
mod object;
pub mod placement;
mod queue;
pub mod shard;
mod source;
mod sync;
pub mod testing;
mod time;
#[cfg(feature = "webhook")]
pub mod webhook;

#[cfg(feature = "dir")]
pub use backend::dir;
#[cfg(feature = "etcd")]
pub use backend::etcd;
#[cfg(feature = "kube")]
pub use backend::kube;
pub use backend::{memory, poll};

/// The attribute that [`Source`] implementations need (`#[tend::async_trait]`),
/// re-exported so that implementing tend's traits needs no extra dependency.
pub use async_trait::async_trait;
pub use informer::{
    Cache, CacheLag, CacheScope, Event, Filter, IndexValue, Informer, InformerBuilder,
    InformerError, InformerId, InformerSetting, InformerStats, Subscription,
};
pub use key::QueueKey;
pub use queue::{
    DoneError, InFlightKey, Payload, Priority, QueueObserver, QueueStats, When, WorkQueue,
    WorkQueueBuilder, rate_limit,
};
/// The token every `run` takes to stop (tokio-util's), re-exported.
pub use tokio_util::sync::CancellationToken;

pub use error::{BoxError, SettingError};
pub use object::{Deletion, LabelSelector, Lifecycle, Object, ObjectKey, Revision, SelectorError};
pub use source::{Change, Snapshot, Source, SourceError, WatchStream};
