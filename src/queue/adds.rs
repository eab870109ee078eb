//! The core's adds: a key made ready now (`add`), later (`add_after`), or
//! once its debounce window ends (`debounce`), and a payload merged into a
//! key already pending.

use std::collections::hash_map::Entry;

use super::core::{Added, Core, Scheduled};
use super::lanes::{Lanes, Place, Ready};
use super::payload::{Payload, merged};
use super::slot::{DEBOUNCED, DIRTY, IN_FLIGHT, READY, SCHEDULED, Slot, Timer};
use super::stamp::Stamp;
use super::{Priority, QueueKey};

impl<K: QueueKey, T: Payload> Core<K, T> {
    /// Makes `key` ready at `priority`: a key already ready stays once (at
    /// the higher priority, keeping its age), one in flight is marked dirty,
    /// a timer is cancelled (now is sooner; the higher priority wins). `now`
    /// is read only when the add is not a no-op, so that a storm of
    /// duplicate adds does not pay for the clock.
    pub(crate) fn add(
        &mut self,
        key: K,
        priority: Priority,
        payload: T,
        now: impl FnOnce() -> Stamp,
    ) -> Added {
        if self.shut_down {
            return Added::Rejected;
        }
        let added = match self.slots.entry(key) {
            Entry::Vacant(entry) => {
                let key = entry.key().clone();
                let slot = entry.insert(Slot::default());
                let ready = Ready {
                    priority,
                    since: now(),
                    payload,
                };
                self.lanes.make_ready(slot, key, ready, Place::Back);
                Added::Queued
            }
            Entry::Occupied(mut entry) => {
                let slot = entry.get_mut();
                if slot.has(IN_FLIGHT) {
                    return add_in_flight(&mut self.lanes, slot, priority, payload, now, false);
                }
                let Some(ready) = pending_ready(&mut self.lanes, slot, priority, payload, now)
                else {
                    return Added::Deduplicated;
                };
                let added = if slot.has(READY) {
                    Added::Deduplicated
                } else {
                    Added::Queued
                };
                let key = entry.key().clone();
                self.lanes
                    .make_ready(entry.get_mut(), key, ready, Place::Back);
                added
            }
        };
        self.compact_if_needed();
        added
    }

    /// Schedules `key` at `deadline` to become ready at `priority`, with
    /// `payload`, which counts only if this timer is the one that makes the key
    /// ready. A timer already due sooner stays, at the higher priority.
    pub(crate) fn add_after(
        &mut self,
        key: K,
        deadline: Stamp,
        priority: Priority,
        payload: T,
        now: Stamp,
    ) -> Scheduled {
        if self.shut_down {
            return Scheduled::Rejected;
        }
        if deadline <= now {
            return Scheduled::Now(self.add(key, priority, payload, || now));
        }
        let (key, slot) = match self.slots.entry(key) {
            Entry::Occupied(entry) => (entry.key().clone(), entry.into_mut()),
            Entry::Vacant(entry) => (entry.key().clone(), entry.insert(Slot::default())),
        };
        if slot.has(READY | DIRTY) {
            // A debounced dirty key would wait a window after `done`: this
            // timer may be sooner, so it runs at `done`.
            slot.state &= !DEBOUNCED;
            return Scheduled::Deduplicated;
        }
        if let Some(timer) = slot.timer().filter(|t| t.deadline <= deadline) {
            slot.priority = timer.priority.max(priority);
            return Scheduled::Deduplicated;
        }
        let ready = Ready {
            priority,
            since: deadline,
            payload,
        };
        let earliest = self.lanes.schedule(slot, key, deadline, ready, None);
        self.compact_if_needed();
        Scheduled::Timer { earliest }
    }

    /// A debounced add (a change event; a plain [`add`](Self::add) when the
    /// queue does not debounce): `key` becomes ready a window after this
    /// add, or at its limit (`max` after the first add it waits for),
    /// whichever is first. A ready key, or a plain timer due sooner, stays
    /// as it is (the payload merged); a key in flight is marked dirty.
    pub(crate) fn debounce(
        &mut self,
        key: K,
        priority: Priority,
        payload: T,
        now: impl FnOnce() -> Stamp,
    ) -> Scheduled {
        let Some(debounce) = self.debounce else {
            return Scheduled::Now(self.add(key, priority, payload, now));
        };
        let now = now();
        let deadline = now.after(debounce.window);
        if self.shut_down || deadline <= now {
            return Scheduled::Now(self.add(key, priority, payload, || now));
        }
        let (key, slot) = match self.slots.entry(key) {
            Entry::Occupied(entry) => (entry.key().clone(), entry.into_mut()),
            Entry::Vacant(entry) => (entry.key().clone(), entry.insert(Slot::default())),
        };
        if slot.has(IN_FLIGHT) {
            let added = add_in_flight(&mut self.lanes, slot, priority, payload, || now, true);
            return Scheduled::Now(added);
        }
        if slot.has(READY) {
            return Scheduled::Now(self.add(key, priority, payload, || now));
        }
        let timer = slot.timer();
        let limit = match timer {
            Some(Timer {
                limit: Some(limit), ..
            }) => limit,
            _ => now.after(debounce.max),
        };
        let deadline = deadline.min(limit);
        // A plain timer due sooner stays (a retry or requeue keeps its
        // time, and the change runs with it); a debounced one is pushed
        // back, unless it is at its limit already.
        let stays = timer.is_some_and(|timer| match timer.limit {
            None => timer.deadline <= deadline,
            Some(_) => timer.deadline >= deadline,
        });
        if stays {
            slot.priority = slot.priority.max(priority);
            slot.payload.merge(payload);
            return Scheduled::Deduplicated;
        }
        let ready = Ready {
            priority,
            since: deadline,
            payload,
        };
        let earliest = self.lanes.schedule(slot, key, deadline, ready, Some(limit));
        self.compact_if_needed();
        Scheduled::Timer { earliest }
    }

    /// If `key` will be handed out without another add (ready, scheduled, or
    /// dirty while processing), adds `payload` to that pending state and
    /// returns true.
    pub(crate) fn merge_pending(&mut self, key: &K, payload: T) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        if !slot.has(READY | SCHEDULED | DIRTY) {
            return false;
        }
        if slot.has(DIRTY) {
            // A retry of a key made dirty by changes: no later than `done`.
            slot.state &= !DEBOUNCED;
        }
        // The payload of whichever of the three the key is in.
        slot.payload.merge(payload);
        true
    }
}

/// An add for a key in flight: it runs again once its worker is done
/// (dirty), which is sooner than any timer it had, at the higher priority.
/// Only `debounced` adds leave it debounced, and only if it had no plain
/// timer (that would have run it sooner than a window after `done`).
fn add_in_flight<K: Clone, T: Payload>(
    lanes: &mut Lanes<K>,
    slot: &mut Slot<T>,
    priority: Priority,
    payload: T,
    now: impl FnOnce() -> Stamp,
    debounced: bool,
) -> Added {
    if slot.has(DIRTY) {
        slot.mark_dirty(priority, Stamp::default(), payload, debounced);
        return Added::Deduplicated;
    }
    // Taken first: a timer and dirty share fields.
    let (priority, payload, debounced) = match lanes.cancel_timer(slot) {
        Some(timer) => (
            timer.priority.max(priority),
            timer.merge_kept(payload),
            debounced && timer.limit.is_some(),
        ),
        None => (priority, payload, debounced),
    };
    slot.mark_dirty(priority, now(), payload, debounced);
    Added::Dirty
}

/// An add for a key ready or scheduled: what it is made ready with, or
/// `None` when it stays as it is (ready at a priority as high; the payload
/// merged). A raised priority moves it to the new level, keeping its age; a
/// timer is cancelled (now is sooner), the higher priority winning.
fn pending_ready<K: Clone, T: Payload>(
    lanes: &mut Lanes<K>,
    slot: &mut Slot<T>,
    priority: Priority,
    payload: T,
    now: impl FnOnce() -> Stamp,
) -> Option<Ready<T>> {
    match slot.queued() {
        Some(queued) if queued.priority >= priority => {
            slot.payload.merge(payload);
            None
        }
        Some(queued) => Some(Ready {
            priority,
            since: queued.since,
            payload: merged(queued.payload, payload),
        }),
        None => {
            let (priority, payload) = match lanes.cancel_timer(slot) {
                Some(timer) => (timer.priority.max(priority), timer.merge_kept(payload)),
                None => (priority, payload),
            };
            Some(Ready {
                priority,
                since: now(),
                payload,
            })
        }
    }
}
