//! How writes wake sleeping watch cursors, at no cost when none sleeps.
//!
//! A write rings only if a cursor counts itself as sleeping. A cursor
//! registers its wake-up and counts itself *before* it looks at the table
//! under the table's lock; a writer reads the count *after* its write released
//! that lock. The lock orders the two: either the cursor's look sees the
//! write, or its count happened before the writer's read and the writer rings.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(super) struct Bell {
    notify: Notify,
    sleepers: AtomicUsize,
}

impl Bell {
    /// Wakes every cursor that counted itself as sleeping. Call after the
    /// table's lock is released.
    pub(super) fn ring(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Waits for the next ring, provided `idle()` (called after the caller
    /// registered and counted itself) says there is nothing to read yet.
    pub(super) async fn sleep_unless(&self, idle: impl FnOnce() -> bool) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let _counted = Sleeping(&self.sleepers);
        if idle() {
            notified.await;
        }
    }
}

/// Uncounts a sleeper however its wait ends (even when dropped).
struct Sleeping<'a>(&'a AtomicUsize);

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
