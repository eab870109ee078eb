//! `StableHasher` and `ShardKey`: a key's hash that never changes.

use std::sync::Arc;

use crate::object::ObjectKey;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A 64-bit hash with a fixed, documented algorithm: FNV-1a over the bytes
/// written, then MurmurHash3's 64-bit finaliser (so that every output bit
/// depends on every input bit).
///
/// The output for given input is part of tend's API: it is the same on
/// every platform, in every process and every version (a test pins known
/// values), so that replicas built at different times agree on every key's
/// shard. Rust's `Hash` and `DefaultHasher` promise none of that (`usize`
/// follows the pointer width; the byte layout of `str` and of tuples is not
/// specified across compiler versions), hence [`ShardKey`].
///
/// # Examples
///
/// ```
/// use tend::shard::StableHasher;
///
/// let mut hasher = StableHasher::new();
/// hasher.write_str("web-1");
/// assert_eq!(hasher.finish(), 0xcdde_3c6a_3e56_b22a);
/// ```
#[derive(Debug, Clone)]
pub struct StableHasher {
    state: u64,
}

impl Default for StableHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl StableHasher {
    /// A hasher that has seen nothing.
    #[must_use]
    pub const fn new() -> Self {
        Self { state: FNV_OFFSET }
    }

    /// Feeds raw bytes (no length: prefer [`write_str`](Self::write_str) for
    /// variable-length parts, so that `("ab", "c")` and `("a", "bc")` differ).
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.state = (self.state ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds a string: its length in bytes as a little-endian `u64`, then
    /// its UTF-8 bytes.
    pub fn write_str(&mut self, text: &str) {
        self.write_u64(text.len() as u64);
        self.write_bytes(text.as_bytes());
    }

    /// Feeds a `u64`, little-endian (every integer is widened to 64 or 128
    /// bits, so `3u8` and `3u64` hash alike).
    pub fn write_u64(&mut self, value: u64) {
        self.write_bytes(&value.to_le_bytes());
    }

    /// Feeds a `u128`, little-endian.
    pub fn write_u128(&mut self, value: u128) {
        self.write_bytes(&value.to_le_bytes());
    }

    /// The hash of everything fed so far.
    #[must_use]
    pub const fn finish(&self) -> u64 {
        mix(self.state)
    }
}

/// MurmurHash3's `fmix64`: a bijection that spreads every bit.
pub(super) const fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A key that can be mapped to a shard: it feeds a [`StableHasher`] the
/// same bytes in every process and every version.
///
/// Implemented for strings, integers, [`ObjectKey`] (namespace, then
/// name), references and smart pointers, and tuples of up to three. For
/// your own key, feed its fields in a fixed order with the hasher's
/// `write_*` methods (or their own `shard_hash`); changing what it feeds
/// moves keys between shards, so treat it as a stored format.
///
/// # Examples
///
/// ```
/// use tend::shard::{ShardKey, StableHasher};
///
/// #[derive(Debug, Clone, PartialEq, Eq, Hash)]
/// struct Tenant { region: String, id: u64 }
///
/// impl ShardKey for Tenant {
///     fn shard_hash(&self, hasher: &mut StableHasher) {
///         self.region.shard_hash(hasher);
///         self.id.shard_hash(hasher);
///     }
/// }
/// ```
pub trait ShardKey {
    /// Feeds this key to `hasher`.
    fn shard_hash(&self, hasher: &mut StableHasher);

    /// This key's stable hash.
    fn stable_hash(&self) -> u64 {
        let mut hasher = StableHasher::new();
        self.shard_hash(&mut hasher);
        hasher.finish()
    }
}

impl ShardKey for str {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        hasher.write_str(self);
    }
}

impl ShardKey for String {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        hasher.write_str(self);
    }
}

impl ShardKey for ObjectKey {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        hasher.write_str(&self.namespace);
        hasher.write_str(&self.name);
    }
}

impl<T: ShardKey + ?Sized> ShardKey for &T {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        (**self).shard_hash(hasher);
    }
}

impl<T: ShardKey + ?Sized> ShardKey for Box<T> {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        (**self).shard_hash(hasher);
    }
}

impl<T: ShardKey + ?Sized> ShardKey for Arc<T> {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        (**self).shard_hash(hasher);
    }
}

macro_rules! unsigned {
    ($($ty:ty),*) => {$(
        impl ShardKey for $ty {
            fn shard_hash(&self, hasher: &mut StableHasher) {
                hasher.write_u64(u64::from(*self));
            }
        }
    )*};
}

macro_rules! signed {
    ($($ty:ty),*) => {$(
        impl ShardKey for $ty {
            fn shard_hash(&self, hasher: &mut StableHasher) {
                // Two's complement, sign-extended to 64 bits.
                hasher.write_u64(i64::from(*self) as u64);
            }
        }
    )*};
}

unsigned!(u8, u16, u32, u64);
signed!(i8, i16, i32, i64);

impl ShardKey for usize {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        // Widened, so 32- and 64-bit platforms agree.
        hasher.write_u64(*self as u64);
    }
}

impl ShardKey for u128 {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        hasher.write_u128(*self);
    }
}

impl<A: ShardKey, B: ShardKey> ShardKey for (A, B) {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        self.0.shard_hash(hasher);
        self.1.shard_hash(hasher);
    }
}

impl<A: ShardKey, B: ShardKey, C: ShardKey> ShardKey for (A, B, C) {
    fn shard_hash(&self, hasher: &mut StableHasher) {
        self.0.shard_hash(hasher);
        self.1.shard_hash(hasher);
        self.2.shard_hash(hasher);
    }
}
