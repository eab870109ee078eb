//! The controller's queue sink: how the informers' handlers, the workers,
//! the external triggers and the feed of gained slots put keys into the
//! controller's queue, with why.

use std::borrow::Cow;
use std::time::Duration;

use super::ownership::{Claimed, Ownership};
use super::{Action, Trigger, Triggers};
use crate::queue::{Add, Priority, When, WorkQueue};

/// Puts keys into the controller's queue, with why: the queue carries each
/// key's triggers (its payload) to the reconcile that handles them.
/// A sharded controller's sink queues only keys of the shards the replica
/// owns (checked before the queue's lock: `ShardKey` is user code).
pub(crate) struct Enqueue<K: crate::QueueKey> {
    pub(crate) queue: WorkQueue<K, Triggers>,
    pub(crate) background: Priority,
    pub(crate) ownership: Option<Ownership<K>>,
}

impl<K: crate::QueueKey> Clone for Enqueue<K> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            background: self.background,
            ownership: self.ownership.clone(),
        }
    }
}

impl<K: crate::QueueKey> Enqueue<K> {
    /// Whether `key` may be queued: always, unless sharded and its shard is
    /// not owned.
    pub(crate) fn wants(&self, key: &K) -> bool {
        wanted(self.ownership.as_ref(), key)
    }

    /// What a worker may do with `key`: reconcile it (under a claim of its
    /// slot, when an ownership decides), skip it or wait.
    pub(crate) fn claim(&self, key: &K) -> Claimed {
        if cfg!(tend_without = "shard_filter") {
            return Claimed::Run(None);
        }
        match &self.ownership {
            None => Claimed::Run(None),
            Some(ownership) => ownership.claim(key),
        }
    }

    /// What to queue for `key`: the background priority for initial lists
    /// and resyncs (so fresh changes go first), else normal priority and
    /// debounced (when the controller debounces: background keys are not
    /// bursts).
    pub(crate) fn entry(&self, key: K, trigger: Trigger, background: bool) -> Add<K, Triggers> {
        let priority = if background {
            self.background
        } else {
            Priority::NORMAL
        };
        Add {
            key,
            priority,
            payload: trigger.into(),
            debounced: !background,
        }
    }

    /// Queues `key` after `delay` (a requeue) at the priority it ran at;
    /// `trigger` is reported only if this timer is what runs the key (an
    /// earlier run cancels it).
    pub(crate) fn push_after(&self, key: K, trigger: Trigger, delay: Duration, priority: Priority) {
        self.queue
            .enqueue(key, When::After(delay), priority, trigger.into());
    }

    /// Queues `key` after its rate limiter's delay (a retry, or a requeue
    /// with backoff) at the priority it ran at, so a failing background key
    /// does not crowd out fresh changes; at least
    /// [`Action::MIN_REQUEUE_DELAY`]: a limiter that answers zero (a token
    /// bucket within its burst) must not make a failing key a busy loop.
    pub(crate) fn push_backoff(&self, key: K, trigger: Trigger, priority: Priority) {
        let floor = Action::MIN_REQUEUE_DELAY;
        self.queue
            .enqueue(key, When::Backoff { floor }, priority, trigger.into());
    }

    /// Queues `key` after `delay` instead of its rate limiter's, still one
    /// more failure on its record (an error that said when to retry).
    pub(crate) fn push_retry_after(&self, key: K, delay: Duration, priority: Priority) {
        self.queue.enqueue(
            key,
            When::RetryAfter(delay),
            priority,
            Trigger::Retry.into(),
        );
    }

    /// Puts `key`, handed out but not reconciled, back as it was: at once,
    /// at its priority, with its triggers (it stays in flight until `done`,
    /// which makes it ready again).
    pub(crate) fn give_back(&self, key: K, priority: Priority, triggers: Triggers) {
        self.queue.enqueue(key, When::Now, priority, triggers);
    }
}

/// The keys gathered since the last flush.
pub(crate) struct Keys<K> {
    pub(super) pending: Vec<(K, Trigger, bool)>,
    ownership: Option<Ownership<K>>,
}

impl<K> Keys<K> {
    pub(super) fn new(ownership: Option<Ownership<K>>) -> Self {
        Self {
            pending: Vec::new(),
            ownership,
        }
    }

    /// Whether `key` may be queued (sharded: its shard is owned).
    pub(super) fn wants(&self, key: &K) -> bool {
        wanted(self.ownership.as_ref(), key)
    }

    /// Asks for `key` to be reconciled because of `trigger`, at the
    /// background priority if `background`, if it is wanted.
    pub(super) fn push(&mut self, key: K, trigger: Trigger, background: bool)
    where
        K: Clone + PartialEq,
    {
        if self.wants(&key) {
            self.push_wanted(Cow::Owned(key), trigger, background);
        }
    }

    /// [`push`](Self::push) for a key [`wants`](Self::wants) passed. The
    /// same ask as the last one is dropped: a burst of one key's events is
    /// queued once, without a lookup in the queue for each event.
    /// A borrowed key is copied only when kept.
    pub(super) fn push_wanted(&mut self, key: Cow<'_, K>, trigger: Trigger, background: bool)
    where
        K: Clone + PartialEq,
    {
        if let Some((last, last_trigger, last_background)) = self.pending.last()
            && (*last_trigger, *last_background) == (trigger, background)
            && *last == *key
        {
            return;
        }
        self.pending.push((key.into_owned(), trigger, background));
    }
}

/// Whether `key` may be queued: always without an ownership, else as it
/// says.
fn wanted<K>(ownership: Option<&Ownership<K>>, key: &K) -> bool {
    cfg!(tend_without = "shard_filter") || ownership.is_none_or(|ownership| ownership.wants(key))
}
