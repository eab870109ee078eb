//! The loom shim: the queue core locks, and its shell flags shutdown,
//! through these types, so the same code runs under loom
//! (`RUSTFLAGS="--cfg tend_loom"`) and in normal builds.

#[cfg(tend_loom)]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(tend_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(tend_loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(tend_loom))]
pub(crate) use std::sync::atomic::AtomicBool;

/// Locks `mutex`, recovering the guard if a previous holder panicked.
#[cfg(tend_loom)]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Locks `mutex` (parking_lot's: no poisoning, and under contention it spins
/// briefly before parking, which suits the queue's short critical sections).
#[cfg(not(tend_loom))]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}
