//! Shared helpers for the informer, memory and poll tests.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

mod scripted;
mod wait;
#[allow(unused_imports)]
pub use scripted::Scripted;
#[allow(unused_imports)]
pub use wait::{eventually as wait_until, within};

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tend::{Event, Informer, Object, Revision, Subscription};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A small test object: `spec` is its desired part (bumps the generation),
/// `status` its observed part, `owner` what the `by_owner` index files it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub owner: String,
    pub spec: u64,
    pub status: u64,
    pub version: Revision,
    pub generation: u64,
}

impl Pod {
    pub fn new(name: impl Into<String>, owner: impl Into<String>, spec: u64) -> Self {
        Self {
            name: name.into(),
            owner: owner.into(),
            spec,
            status: 0,
            version: Revision::ZERO,
            generation: 0,
        }
    }
}

impl Object for Pod {
    type Key = String;

    fn key(&self) -> String {
        self.name.clone()
    }

    fn version(&self) -> Revision {
        self.version
    }

    fn set_version(&mut self, version: Revision) {
        self.version = version;
    }

    fn generation(&self) -> Option<u64> {
        Some(self.generation)
    }

    fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    fn spec_changed(&self, old: &Self) -> bool {
        self.spec != old.spec || self.owner != old.owner
    }
}

/// The `by_owner` index function.
pub fn by_owner(pod: &Pod) -> Vec<String> {
    vec![pod.owner.clone()]
}

/// What a recorded event was, reduced to comparable parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Initial(String, u64),
    Applied {
        key: String,
        old: Option<u64>,
        new: u64,
    },
    Deleted(String, u64),
    Resync(String, u64),
}

impl Seen {
    pub fn of(event: &Event<Pod>) -> Self {
        let v = |pod: &Pod| pod.version.get();
        match event {
            Event::Initial(pod) => Self::Initial(pod.name.clone(), v(pod)),
            Event::Applied { old, new } => Self::Applied {
                key: new.name.clone(),
                old: old.as_deref().map(v),
                new: v(new),
            },
            Event::Deleted(pod) => Self::Deleted(pod.name.clone(), v(pod)),
            Event::Resync(pod) => Self::Resync(pod.name.clone(), v(pod)),
        }
    }
}

/// A subscriber that records every event.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    pub fn subscribe(informer: &Informer<Pod>) -> (Self, Subscription<Pod>) {
        let recorder = Self::default();
        let sink = Arc::clone(&recorder.seen);
        let subscription = informer.subscribe(move |event: &Event<Pod>| {
            sink.lock().unwrap().push(Seen::of(event));
        });
        (recorder, subscription)
    }

    /// Every event so far, clearing the record.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    pub fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn count(&self, matches: impl Fn(&Seen) -> bool) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|seen| matches(seen))
            .count()
    }
}

/// A subscriber that replays events into a map, to compare with the cache.
#[derive(Debug, Clone, Default)]
pub struct Mirror {
    pub objects: Arc<Mutex<HashMap<String, u64>>>,
    /// Events that would have moved a key back in time, or did not match
    /// the mirror's state.
    pub anomalies: Arc<Mutex<Vec<String>>>,
}

impl Mirror {
    pub fn subscribe(informer: &Informer<Pod>) -> (Self, Subscription<Pod>) {
        let mirror = Self::default();
        let (objects, anomalies) = (Arc::clone(&mirror.objects), Arc::clone(&mirror.anomalies));
        let subscription = informer.subscribe(move |event: &Event<Pod>| {
            let mut objects = objects.lock().unwrap();
            let anomaly = |text: String| anomalies.lock().unwrap().push(text);
            match event {
                Event::Initial(pod) | Event::Resync(pod) => {
                    objects.insert(pod.name.clone(), pod.version.get());
                }
                Event::Applied { old, new } => {
                    let previous = objects.insert(new.name.clone(), new.version.get());
                    if previous != old.as_deref().map(|pod| pod.version.get()) {
                        anomaly(format!(
                            "{}: old {previous:?} does not match event",
                            new.name
                        ));
                    }
                    if old.as_deref().is_some_and(|old| old.version >= new.version) {
                        anomaly(format!("{}: regression to {}", new.name, new.version));
                    }
                }
                Event::Deleted(pod) => {
                    if objects.remove(&pod.name) != Some(pod.version.get()) {
                        anomaly(format!("{}: deleted state does not match", pod.name));
                    }
                }
            }
        });
        (mirror, subscription)
    }

    pub fn snapshot(&self) -> HashMap<String, u64> {
        self.objects.lock().unwrap().clone()
    }

    pub fn anomalies(&self) -> Vec<String> {
        self.anomalies.lock().unwrap().clone()
    }
}

/// The informer's cache as key → version.
pub fn cache_versions(informer: &Informer<Pod>) -> HashMap<String, u64> {
    informer
        .cache()
        .list()
        .iter()
        .map(|pod| (pod.name.clone(), pod.version.get()))
        .collect()
}

/// A source's objects as key → version.
pub fn versions(pods: &[Pod]) -> HashMap<String, u64> {
    pods.iter()
        .map(|pod| (pod.name.clone(), pod.version.get()))
        .collect()
}

/// An informer running in a task, stopped by [`Running::stop`].
#[derive(Debug)]
pub struct Running {
    cancel: CancellationToken,
    task: JoinHandle<Result<(), tend::InformerError>>,
}

impl Running {
    pub fn start<O: Object>(informer: &Informer<O>) -> Self {
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (informer, cancel) = (informer.clone(), cancel.clone());
            async move { informer.run(cancel).await }
        });
        Self { cancel, task }
    }

    /// Cancels the run and checks it returned `Ok` promptly.
    pub async fn stop(self) {
        self.cancel.cancel();
        let joined = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("informer run did not return within 5 s of cancellation");
        joined
            .expect("informer task panicked")
            .expect("informer run failed");
    }
}

/// Asserts two maps are equal, printing a short diff when they are not.
pub fn assert_same<V: PartialEq + Debug>(
    what: &str,
    left: &HashMap<String, V>,
    right: &HashMap<String, V>,
) {
    if left == right {
        return;
    }
    let mut diff: Vec<String> = left
        .iter()
        .filter(|(key, value)| right.get(*key) != Some(value))
        .map(|(key, value)| format!("{key}: {value:?} vs {:?}", right.get(key)))
        .chain(
            right
                .keys()
                .filter(|key| !left.contains_key(*key))
                .map(|key| format!("{key}: missing vs {:?}", right[key])),
        )
        .collect();
    diff.sort();
    diff.truncate(10);
    panic!(
        "{what}: {} vs {} entries differ, e.g. {diff:?}",
        left.len(),
        right.len()
    );
}
