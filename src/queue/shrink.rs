//! Memory given back after a burst: containers shrink once they are at most
//! an eighth full, to twice what they hold.
//!
//! Amortised: a shrink to `2 × len` can only be followed by another once the
//! length quarters again, and growth doubles, so a load that swings between
//! `n` and `2n` reallocates at most once per swing, at a cost in proportion
//! to the `n` operations of the swing; a burst draining to nothing copies
//! about a seventh of its entries on the way. Small containers never
//! shrink.

/// Capacity kept however empty a container gets.
const FLOOR: usize = 1024;

/// Whether a container of `len` items in `capacity` should give memory back.
pub(super) fn is_sparse(len: usize, capacity: usize) -> bool {
    capacity > FLOOR && len < capacity / 8
}

/// The capacity to shrink a container of `len` items to.
pub(super) fn target(len: usize) -> usize {
    len.saturating_mul(2)
}
