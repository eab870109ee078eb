//! A directory watch: OS notifications (on notify's own thread) bridged into
//! a tokio channel, gathered in short windows, turned into re-reads of the
//! paths they name; the changes those reads find come out of the table's
//! history, in revision order.

use std::collections::{BTreeSet, VecDeque};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};

use super::scan;
use super::source::{Decoders, Engine};
use crate::object::{Object, Revision};
use crate::source::{Change, SourceError, WatchStream};

/// Paths gathered in one window past which a full scan is cheaper to hold.
const MAX_BATCH_PATHS: usize = 16_384;

/// A watch's settings, copied from the source.
pub(super) struct Config {
    pub(super) debounce: Duration,
    pub(super) buffer: NonZeroUsize,
    pub(super) poll_interval: Duration,
}

/// Set by notify's thread when the channel was full and a notification was
/// dropped; `wake` makes sure the stream looks.
struct Lost {
    flag: AtomicBool,
    wake: Notify,
    /// The source's count of lost notifications.
    count: Arc<AtomicU64>,
}

/// What one window of notifications asks for.
#[derive(Default)]
struct Batch {
    paths: BTreeSet<PathBuf>,
    full: bool,
}

impl Batch {
    fn add(&mut self, event: notify::Result<Event>) {
        match event {
            Ok(event) if event.need_rescan() => {
                tracing::warn!("the OS lost file notifications; reading the whole directory");
                self.full = true;
            }
            Ok(event) => self.paths.extend(event.paths),
            Err(error) => {
                tracing::warn!(%error, "file notification error; reading the whole directory");
                self.full = true;
            }
        }
        if self.paths.len() > MAX_BATCH_PATHS {
            self.full = true;
        }
        if self.full {
            self.paths.clear();
        }
    }
}

/// One watch stream's state.
struct DirWatch<O: Object> {
    engine: Arc<Engine<O>>,
    decoders: Arc<Decoders<O>>,
    /// The root as given and canonical: how notifications may name it.
    roots: Vec<PathBuf>,
    cursor: Revision,
    ready: VecDeque<Change<O>>,
    /// Dropped with the stream, which stops it. `None`: polling instead.
    watcher: Option<RecommendedWatcher>,
    events: mpsc::Receiver<notify::Result<Event>>,
    lost: Arc<Lost>,
    changed: tokio::sync::watch::Receiver<Revision>,
    poll: tokio::time::Interval,
    debounce: Duration,
    /// A full scan is due: at the start (changes since the list) and after
    /// lost notifications.
    full: bool,
}

/// Starts the OS watcher (on a blocking thread: a recursive watch walks the
/// tree) and returns the stream.
pub(super) async fn start<O: Object>(
    engine: Arc<Engine<O>>,
    decoders: Arc<Decoders<O>>,
    config: Config,
    from: Revision,
) -> Result<WatchStream<O>, SourceError> {
    let (sender, events) = mpsc::channel(config.buffer.get());
    let lost = Arc::new(Lost {
        flag: AtomicBool::new(false),
        wake: Notify::new(),
        count: Arc::clone(&engine.missed),
    });
    let root = engine.root.clone();
    let handler = handler(sender, Arc::clone(&lost));
    let (watcher, canonical) = tokio::task::spawn_blocking(move || {
        let watcher = watch_root(&root, handler);
        (watcher, std::fs::canonicalize(&root).ok())
    })
    .await
    .map_err(SourceError::unavailable)?;
    let watcher = match watcher {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::warn!(source = %engine.name, %error, every = ?config.poll_interval, "file notifications unavailable; reading the directory on an interval");
            None
        }
    };
    let mut roots = vec![engine.root.clone()];
    roots.extend(canonical.filter(|canonical| *canonical != engine.root));
    let mut poll = tokio::time::interval_at(
        tokio::time::Instant::now() + config.poll_interval,
        config.poll_interval,
    );
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let changed = engine.changed.subscribe();
    let watch = DirWatch {
        engine,
        decoders,
        roots,
        cursor: from,
        ready: VecDeque::new(),
        watcher,
        events,
        lost,
        changed,
        poll,
        debounce: config.debounce,
        full: true,
    };
    Ok(futures::stream::unfold(watch, |mut watch| async move {
        let item = watch.next().await;
        Some((item, watch))
    })
    .boxed())
}

/// The callback notify calls on its thread: never blocks; a full channel
/// drops the notification and says so.
fn handler(
    sender: mpsc::Sender<notify::Result<Event>>,
    lost: Arc<Lost>,
) -> impl Fn(notify::Result<Event>) + Send + 'static {
    move |event| {
        // Opening a file is no change (and the source's own reads open
        // files: forwarding them would loop).
        if let Ok(Event {
            kind: EventKind::Access(access),
            ..
        }) = &event
            && !matches!(access, AccessKind::Close(AccessMode::Write))
        {
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = sender.try_send(event) {
            lost.count.fetch_add(1, Ordering::Relaxed);
            lost.flag.store(true, Ordering::Release);
            lost.wake.notify_one();
        }
    }
}

fn watch_root(
    root: &std::path::Path,
    handler: impl Fn(notify::Result<Event>) + Send + 'static,
) -> notify::Result<RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(handler)?;
    watcher.watch(root, RecursiveMode::Recursive)?;
    Ok(watcher)
}

impl<O: Object> DirWatch<O> {
    /// The next change, or the error that ends the stream.
    async fn next(&mut self) -> Result<Change<O>, SourceError> {
        loop {
            if let Some(change) = self.ready.pop_front() {
                return Ok(change);
            }
            let changes = self.engine.table.lock().changes_after(self.cursor)?;
            if let Some(last) = changes.last() {
                self.cursor = last.revision();
                self.ready.extend(changes);
                continue;
            }
            if std::mem::take(&mut self.full) {
                self.scan_all().await?;
                continue;
            }
            let batch = self.wait().await;
            if batch.full || self.lost.flag.swap(false, Ordering::AcqRel) {
                self.full = true;
            } else if !batch.paths.is_empty() {
                self.scan(batch.paths).await?;
            }
        }
    }

    /// Waits for notifications (gathered for the debounce window), for lost
    /// ones, for another stream's scan, or for the poll timer.
    async fn wait(&mut self) -> Batch {
        self.changed.borrow_and_update();
        let mut batch = Batch::default();
        tokio::select! {
            event = self.events.recv(), if self.watcher.is_some() => match event {
                Some(event) => {
                    batch.add(event);
                    self.gather(&mut batch).await;
                }
                None => batch.full = true,
            },
            () = self.lost.wake.notified() => self.count_lost(&mut batch),
            _ = self.changed.changed() => {}
            _ = self.poll.tick(), if self.watcher.is_none() => batch.full = true,
        }
        batch
    }

    fn count_lost(&self, batch: &mut Batch) {
        if self.lost.flag.swap(false, Ordering::AcqRel) {
            tracing::warn!(source = %self.engine.name, "file notifications lost; reading the whole directory");
            batch.full = true;
        }
    }

    /// Adds the notifications of one debounce window to `batch`.
    async fn gather(&mut self, batch: &mut Batch) {
        let window = tokio::time::sleep(self.debounce);
        tokio::pin!(window);
        loop {
            tokio::select! {
                () = &mut window => break,
                event = self.events.recv() => match event {
                    Some(event) => batch.add(event),
                    None => break,
                },
            }
        }
        self.count_lost(batch);
    }

    async fn scan_all(&mut self) -> Result<(), SourceError> {
        let (engine, decoders) = (Arc::clone(&self.engine), Arc::clone(&self.decoders));
        let scanned = tokio::task::spawn_blocking(move || scan::full(&engine, &decoders))
            .await
            .map_err(SourceError::unavailable)?;
        if scanned.is_err() {
            // Try again when this stream is polled again.
            self.full = true;
        }
        scanned
    }

    async fn scan(&mut self, paths: BTreeSet<PathBuf>) -> Result<(), SourceError> {
        let (engine, decoders) = (Arc::clone(&self.engine), Arc::clone(&self.decoders));
        let roots = self.roots.clone();
        tokio::task::spawn_blocking(move || scan::paths(&engine, &decoders, &roots, paths))
            .await
            .map_err(SourceError::unavailable)
    }
}
