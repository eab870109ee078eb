//! The loom shim: the queue core locks through these types, so the same code
//! runs under loom (`RUSTFLAGS="--cfg tend_loom"`) and in normal builds.

#[cfg(tend_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(tend_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering the guard if a previous holder panicked.
///
/// Holders of our locks keep their data consistent between statements, and
/// the user callbacks called under a lock (the queue observer's `depth`, a
/// rate limiter's `when`) run after the data is changed or before it is, so
/// a poisoned lock still guards valid state and is safe to reuse.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
