//! `PollSource`: a source that lists on an interval and diffs.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::error::BoxError;
use crate::object::{Object, Revision};
use crate::source::{Change, Snapshot, Source, SourceError, WatchStream};

/// The list function a [`PollSource`] calls, boxed.
type ListFn<O> = Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<O>, BoxError>> + Send + Sync>;

/// Why a [`PollSource`] could not be built.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::poll::{PollConfigError, PollSource};
/// # #[derive(Clone, Debug, PartialEq)] struct Reading { room: String, version: tend::Revision }
/// # tend::impl_object!(Reading, key: room: String, version: version);
///
/// let built = PollSource::new("thermometer", Duration::ZERO, || async {
///     Ok::<Vec<Reading>, std::io::Error>(Vec::new())
/// });
/// assert!(matches!(built, Err(PollConfigError::ZeroInterval)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PollConfigError {
    /// The poll interval was zero.
    #[error("poll interval must be greater than zero")]
    ZeroInterval,
}

/// A [`Source`] that lists on an interval and diffs; see the
/// [module docs](super).
///
/// # Examples
///
/// A thermometer that can only be read, polled every second into an
/// informer's cache (under the paused clock, seconds take no real time):
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tend::poll::PollSource;
/// use tend::{CancellationToken, Informer, Revision};
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Reading { room: String, celsius: i32, version: Revision }
/// tend::impl_object!(Reading, key: room: String, version: version);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let sensor = Arc::new(Mutex::new(19));
/// let source = PollSource::new("thermometer", Duration::from_secs(1), {
///     let sensor = Arc::clone(&sensor);
///     move || {
///         let celsius = *sensor.lock().unwrap();
///         async move {
///             let reading = Reading { room: "hall".into(), celsius, version: Revision::ZERO };
///             Ok::<_, std::io::Error>(vec![reading])
///         }
///     }
/// })?;
/// let informer = Informer::builder(source).build()?;
/// let stop = CancellationToken::new();
/// let watching = tokio::spawn({
///     let (informer, stop) = (informer.clone(), stop.clone());
///     async move { informer.run(stop).await }
/// });
/// let store = informer.cache();
/// store.wait_synced(Duration::from_secs(5)).await?;
/// assert_eq!(store.get(&"hall".to_owned()).unwrap().celsius, 19);
///
/// *sensor.lock().unwrap() = 21; // seen at the next poll
/// tokio::time::sleep(Duration::from_secs(2)).await;
/// assert_eq!(store.get(&"hall".to_owned()).unwrap().celsius, 21);
/// stop.cancel();
/// watching.await??;
/// # Ok(()) }
/// ```
pub struct PollSource<O: Object> {
    name: Arc<str>,
    interval: Duration,
    max_backoff: Duration,
    list: ListFn<O>,
    state: Arc<Mutex<PollState<O>>>,
}

/// The previous snapshot and the revision counter.
struct PollState<O: Object> {
    revision: Revision,
    objects: HashMap<O::Key, O>,
}

impl<O: Object> fmt::Debug for PollSource<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollSource")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .field("max_backoff", &self.max_backoff)
            .finish_non_exhaustive()
    }
}

impl<O: Object + PartialEq> PollSource<O> {
    /// A source named `name` that calls `list` every `interval` (±10 %).
    ///
    /// The maximum backoff after errors defaults to the larger of five
    /// minutes and `interval`.
    ///
    /// # Errors
    ///
    /// [`PollConfigError::ZeroInterval`] when `interval` is zero.
    pub fn new<F, Fut, E>(
        name: impl Into<Arc<str>>,
        interval: Duration,
        list: F,
    ) -> Result<Self, PollConfigError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        if interval.is_zero() {
            return Err(PollConfigError::ZeroInterval);
        }
        let list: ListFn<O> = Arc::new(move || {
            let listing = list();
            Box::pin(async move { listing.await.map_err(Into::into) })
        });
        Ok(Self {
            name: name.into(),
            interval,
            max_backoff: interval.max(Duration::from_secs(300)),
            list,
            state: Arc::new(Mutex::new(PollState {
                revision: Revision::ZERO,
                objects: HashMap::new(),
            })),
        })
    }

    /// Sets the longest wait between attempts after errors, before the
    /// ±10 % jitter (at least the interval; `Duration::MAX`: no maximum).
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff.max(self.interval);
        self
    }

    fn poller(&self) -> Poller<O> {
        Poller {
            name: Arc::clone(&self.name),
            list: Arc::clone(&self.list),
            state: Arc::clone(&self.state),
        }
    }
}

/// What a poll needs, detached from the source so a stream can own it.
struct Poller<O: Object> {
    name: Arc<str>,
    list: ListFn<O>,
    state: Arc<Mutex<PollState<O>>>,
}

impl<O: Object + PartialEq> Poller<O> {
    /// Lists once and returns the changes since the previous list.
    async fn poll(&self) -> Result<Vec<Change<O>>, SourceError> {
        let listed = (self.list)().await.map_err(SourceError::Unavailable)?;
        Ok(self.state.lock().diff(listed))
    }
}

impl<O: Object + PartialEq> PollState<O> {
    /// Replaces the previous snapshot with `listed`, numbering each
    /// difference with a new revision.
    fn diff(&mut self, listed: Vec<O>) -> Vec<Change<O>> {
        let mut changes = Vec::new();
        let mut previous =
            std::mem::replace(&mut self.objects, HashMap::with_capacity(listed.len()));
        for mut object in listed {
            let key = object.key();
            let unchanged = match previous.remove(&key) {
                Some(old) => {
                    object.set_version(old.version());
                    object == old
                }
                None => false,
            };
            if !unchanged {
                self.revision = self.revision.next();
                object.set_version(self.revision);
                changes.push(Change::Applied(object.clone()));
            }
            self.objects.insert(key, object);
        }
        for key in previous.into_keys() {
            self.revision = self.revision.next();
            changes.push(Change::Deleted {
                key,
                revision: self.revision,
            });
        }
        changes
    }
}

#[async_trait]
impl<O: Object + PartialEq> Source for PollSource<O> {
    type Object = O;

    fn name(&self) -> &str {
        &self.name
    }

    async fn list(&self) -> Result<Snapshot<O>, SourceError> {
        self.poller().poll().await?;
        let state = self.state.lock();
        Ok(Snapshot {
            objects: state.objects.values().cloned().collect(),
            revision: state.revision,
        })
    }

    async fn watch(&self, from: Revision) -> Result<WatchStream<O>, SourceError> {
        let revision = self.state.lock().revision;
        if from != revision {
            return Err(SourceError::Expired {
                requested: from,
                compacted: revision,
            });
        }
        let stream = PollStream {
            poller: self.poller(),
            interval: self.interval,
            max_backoff: self.max_backoff,
            failures: 0,
            ready: VecDeque::new(),
            rng: fastrand::Rng::new(),
        };
        Ok(Box::pin(futures::stream::unfold(
            stream,
            |mut stream| async move {
                let change = stream.next().await;
                Some((Ok(change), stream))
            },
        )))
    }
}

/// The endless stream of changes found by polling.
struct PollStream<O: Object> {
    poller: Poller<O>,
    interval: Duration,
    max_backoff: Duration,
    failures: u32,
    ready: VecDeque<Change<O>>,
    rng: fastrand::Rng,
}

impl<O: Object + PartialEq> PollStream<O> {
    async fn next(&mut self) -> Change<O> {
        loop {
            if let Some(change) = self.ready.pop_front() {
                return change;
            }
            tokio::time::sleep(self.delay()).await;
            match self.poller.poll().await {
                Ok(changes) => {
                    self.failures = 0;
                    self.ready.extend(changes);
                }
                Err(error) => {
                    self.failures = self.failures.saturating_add(1);
                    tracing::warn!(source = %self.poller.name, failures = self.failures, error = %crate::error::error_chain(&error), "poll failed; backing off");
                }
            }
        }
    }

    /// The interval, doubled for each consecutive failure up to the maximum
    /// backoff, jittered ±10 %.
    fn delay(&mut self) -> Duration {
        let base = crate::time::doubled(self.interval, self.failures, self.max_backoff);
        crate::time::jittered(base, self.rng.f64())
    }
}
