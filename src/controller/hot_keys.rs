//! Hot keys: a key reconciled again and again with a write each time (two
//! controllers undoing each other, a reconciler that writes a changing
//! value on every run). Detected from a sliding count per key of the
//! reconciles that wrote; optionally spaced out while the episode lasts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Trigger, Triggers};
use crate::QueueKey;

/// When a key is hot, and what to do about it (see
/// [`ControllerBuilder::hot_keys`](super::ControllerBuilder::hot_keys)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::controller::HotKeyPolicy;
///
/// let policy = HotKeyPolicy::new(30, Duration::from_secs(60)).spaced_up_to(Duration::from_secs(30));
/// assert_eq!(policy.writes(), 30);
/// assert_eq!(policy.spacing(), Some(Duration::from_secs(30)));
/// assert_eq!(HotKeyPolicy::default(), HotKeyPolicy::new(30, Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeyPolicy {
    writes: u32,
    window: Duration,
    spacing: Option<Duration>,
}

impl Default for HotKeyPolicy {
    /// Hot past 30 reconciles that wrote within a minute (a reconcile every
    /// two seconds, each changing something, for a minute); not spaced.
    fn default() -> Self {
        Self::new(30, Duration::from_secs(60))
    }
}

impl HotKeyPolicy {
    /// A key is hot once more than `writes` of its reconciles wrote within
    /// `window` (a sliding count), and calm again below half of that.
    #[must_use]
    pub const fn new(writes: u32, window: Duration) -> Self {
        Self {
            writes,
            window,
            spacing: None,
        }
    }

    /// While a key is hot, holds it after each reconcile for a delay that
    /// starts at a second and doubles up to `max`: changes meanwhile
    /// coalesce, and the key's latest state is reconciled when the delay
    /// ends. Nothing is lost; the fight only slows down. The key counts as
    /// in flight while held (the status page lists it, and the manager's
    /// `/healthz` calls a key stuck past its bound): keep `max` well below
    /// that bound (by default 3 × the reconcile timeout).
    #[must_use]
    pub const fn spaced_up_to(mut self, max: Duration) -> Self {
        self.spacing = Some(max);
        self
    }

    /// The writing reconciles within a window past which a key is hot.
    #[must_use]
    pub const fn writes(&self) -> u32 {
        self.writes
    }

    /// The window.
    #[must_use]
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The longest spacing, if hot keys are spaced.
    #[must_use]
    pub const fn spacing(&self) -> Option<Duration> {
        self.spacing
    }
}

/// The first spacing of a hot key.
const FIRST_SPACING: Duration = Duration::from_secs(1);

/// A key that is hot now, from [`HotKeys::hot`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HotKey<K> {
    /// The key.
    pub key: K,
    /// Its reconciles that wrote within the last window (the sliding count).
    pub writes: f64,
    /// How many of the episode's writing reconciles each trigger woke,
    /// most first: what keeps waking it.
    pub woken_by: Vec<(Trigger, u32)>,
    /// When the episode began.
    pub since: Instant,
    /// The hold after its next reconcile, when spaced.
    pub spacing: Option<Duration>,
}

/// A controller's hot keys: a cheap handle, from
/// [`Controller::hot_keys`](super::Controller::hot_keys). Only reconciles
/// that wrote through their context's client are counted, so a controller
/// that writes nothing costs nothing here.
///
/// # Examples
///
/// See [`HotKeyPolicy`] and the controller docs; [`hot`](Self::hot) lists
/// the keys hot now.
#[derive(Debug)]
pub struct HotKeys<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for HotKeys<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<K> {
    name: String,
    policy: Option<HotKeyPolicy>,
    tracks: Mutex<Tracks<K>>,
}

#[derive(Debug)]
struct Tracks<K> {
    by_key: HashMap<K, Track>,
    /// When entries idle for two windows were last dropped.
    pruned: Instant,
    episodes: u64,
}

/// One key's sliding count: this window's and the previous one's.
#[derive(Debug, Clone)]
struct Track {
    window_start: Instant,
    count: u32,
    previous: u32,
    woken_by: [u32; Trigger::COUNT],
    hot_since: Option<Instant>,
    spacing: Duration,
}

impl Track {
    fn new(now: Instant) -> Self {
        Self {
            window_start: now,
            count: 0,
            previous: 0,
            woken_by: [0; Trigger::COUNT],
            hot_since: None,
            spacing: FIRST_SPACING,
        }
    }

    /// Moves the windows on to `now`.
    fn roll(&mut self, now: Instant, window: Duration) {
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= window.saturating_mul(2) {
            (self.previous, self.count, self.window_start) = (0, 0, now);
        } else if elapsed >= window {
            (self.previous, self.count) = (self.count, 0);
            self.window_start = crate::time::deadline(self.window_start, window);
        }
    }

    /// The sliding count at `now` (after `roll`).
    fn writes(&self, now: Instant, window: Duration) -> f64 {
        let into = now
            .saturating_duration_since(self.window_start)
            .as_secs_f64();
        let share = 1.0 - (into / window.as_secs_f64().max(f64::MIN_POSITIVE)).min(1.0);
        f64::from(self.previous) * share + f64::from(self.count)
    }
}

/// What a writing reconcile made of its key (calm by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Heat {
    /// The episode began with this reconcile.
    pub(super) began: bool,
    /// Hold the key this long before it runs again (hot, and spaced).
    pub(super) spacing: Option<Duration>,
}

impl<K: QueueKey> HotKeys<K> {
    /// A tracker for controller `name`; `None`: detection off.
    pub(crate) fn new(name: &str, policy: Option<HotKeyPolicy>) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                policy,
                tracks: Mutex::new(Tracks {
                    by_key: HashMap::new(),
                    pruned: Instant::now(),
                    episodes: 0,
                }),
            }),
        }
    }

    /// Keys with a write count kept (idle ones are pruned).
    pub(crate) fn tracked(&self) -> usize {
        self.inner.tracks.lock().by_key.len()
    }

    /// Records a reconcile of `key`, woken by `triggers`, that wrote.
    pub(super) fn wrote(&self, key: &K, triggers: Triggers, now: Instant) -> Heat {
        let Some(policy) = self.inner.policy else {
            return Heat::default();
        };
        let mut guard = self.inner.tracks.lock();
        let tracks = &mut *guard;
        tracks.prune(now, policy.window);
        if !tracks.by_key.contains_key(key) {
            tracks.by_key.insert(key.clone(), Track::new(now));
        }
        let Some(track) = tracks.by_key.get_mut(key) else {
            return Heat::default();
        };
        track.roll(now, policy.window);
        track.count = track.count.saturating_add(1);
        for trigger in triggers.iter() {
            let woken = &mut track.woken_by[trigger.index()];
            *woken = woken.saturating_add(1);
        }
        let writes = track.writes(now, policy.window);
        let began = track.hot_since.is_none() && writes > f64::from(policy.writes);
        if began {
            track.hot_since = Some(now);
            let woken_by = woken_by(&track.woken_by);
            tracks.episodes = tracks.episodes.saturating_add(1);
            tracing::warn!(controller = %self.inner.name, key = ?key, writes, window = ?policy.window, woken_by = %describe(&woken_by), "a key is reconciled again and again with a write each time: two controllers undoing each other, or a reconciler writing a new value on every run");
        } else if track.cools(now, policy) {
            tracing::info!(controller = %self.inner.name, key = ?key, "a hot key calmed down");
            return Heat::default();
        }
        if track.hot_since.is_none() {
            return Heat::default();
        }
        let spacing = policy.spacing.map(|max| {
            let spacing = track.spacing.min(max);
            track.spacing = track.spacing.saturating_mul(2).min(max);
            spacing
        });
        Heat { began, spacing }
    }

    /// The keys hot now (a key whose count fell below half the bound is
    /// calm, whether or not it was reconciled since).
    #[must_use]
    pub fn hot(&self) -> Vec<HotKey<K>> {
        let Some(policy) = self.inner.policy else {
            return Vec::new();
        };
        let now = Instant::now();
        let mut tracks = self.inner.tracks.lock();
        let mut hot = Vec::new();
        for (key, track) in &mut tracks.by_key {
            track.roll(now, policy.window);
            if track.cools(now, policy) {
                continue;
            }
            if let Some(since) = track.hot_since {
                hot.push(HotKey {
                    key: key.clone(),
                    writes: track.writes(now, policy.window),
                    woken_by: woken_by(&track.woken_by),
                    since,
                    spacing: policy.spacing.map(|max| track.spacing.min(max)),
                });
            }
        }
        hot
    }

    /// Episodes begun since the controller was built.
    #[must_use]
    pub fn episodes(&self) -> u64 {
        self.inner.tracks.lock().episodes
    }
}

impl<K: QueueKey> Tracks<K> {
    /// Drops, once a window, the keys that wrote nothing for two windows.
    fn prune(&mut self, now: Instant, window: Duration) {
        if now.saturating_duration_since(self.pruned) < window {
            return;
        }
        self.pruned = now;
        self.by_key.retain(|_, track| {
            track.roll(now, window);
            track.count > 0 || track.previous > 0
        });
    }
}

impl Track {
    /// Ends a hot episode whose count fell below half the bound; whether it
    /// did now.
    fn cools(&mut self, now: Instant, policy: HotKeyPolicy) -> bool {
        let cooled = self.hot_since.is_some()
            && self.writes(now, policy.window) < f64::from(policy.writes) / 2.0;
        if cooled {
            self.hot_since = None;
            self.woken_by = [0; Trigger::COUNT];
            self.spacing = FIRST_SPACING;
        }
        cooled
    }
}

/// The triggers that woke a key's writing reconciles, most first.
fn woken_by(counts: &[u32; Trigger::COUNT]) -> Vec<(Trigger, u32)> {
    let mut woken: Vec<_> = Trigger::all()
        .into_iter()
        .zip(counts.iter().copied())
        .filter(|&(_, count)| count > 0)
        .collect();
    woken.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    woken
}

/// `changed ×28, owned ×2`.
pub(crate) fn describe(woken_by: &[(Trigger, u32)]) -> String {
    let parts: Vec<String> = woken_by.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
    parts.join(", ")
}
