//! `ShardCount` and `Shard`: how many shards, and which one a key is in.

use std::fmt;
use std::num::NonZeroU32;

use super::hash::ShardKey;

/// How many shards the keys are spread over: between 1 and
/// [`ShardCount::MAX`].
///
/// Every replica of a controller must use the same count: it is part of
/// the mapping of keys to shards, like the hash. Changing it moves most
/// keys.
///
/// # Examples
///
/// ```
/// use tend::shard::ShardCount;
///
/// let shards = ShardCount::new(16)?;
/// let shard = shards.shard_of("shop/web-1");
/// assert!(shard.index() < shards.get());
/// assert_eq!(shards.shard_of(&"shop/web-1".to_owned()), shard); // the same everywhere
/// assert_eq!(shards.shards().len(), 16);
/// assert_eq!(shards.shard(shard.index()), Some(shard));
/// assert_eq!(ShardCount::default().get(), 256);
/// assert!(ShardCount::new(0).is_err());
/// # Ok::<(), tend::shard::ShardCountError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardCount(NonZeroU32);

impl ShardCount {
    /// The most shards (65 536): each is a record in the backend and a
    /// rendezvous among the members, so more buys nothing but cost.
    pub const MAX: u32 = 1 << 16;

    /// The default: 256 shards (enough for each of a few dozen replicas to
    /// get a share within a few percent of the mean; see the module docs).
    pub const DEFAULT: Self = Self(NonZeroU32::new(256).expect("256 is not zero"));

    /// A count of `count` shards.
    ///
    /// # Errors
    ///
    /// [`ShardCountError`] when `count` is 0 or above [`MAX`](Self::MAX).
    pub const fn new(count: u32) -> Result<Self, ShardCountError> {
        match NonZeroU32::new(count) {
            Some(nonzero) if count <= Self::MAX => Ok(Self(nonzero)),
            _ => Err(ShardCountError { count }),
        }
    }

    /// The number of shards.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The shard `key` is in: its [stable hash](ShardKey::stable_hash)
    /// scaled to `0..count` (multiply and keep the high 64 bits, which
    /// keeps the hash's uniformity without a division).
    #[must_use]
    pub fn shard_of<K: ShardKey + ?Sized>(self, key: &K) -> Shard {
        let scaled = (u128::from(key.stable_hash()) * u128::from(self.get())) >> 64;
        // Below `count`, which is a u32.
        Shard(u32::try_from(scaled).unwrap_or(u32::MAX))
    }

    /// Every shard, in order.
    pub fn shards(self) -> impl ExactSizeIterator<Item = Shard> + Clone {
        (0..self.get()).map(Shard)
    }

    /// Shard number `index`, or `None` when it is not below the count.
    #[must_use]
    pub fn shard(self, index: u32) -> Option<Shard> {
        (index < self.get()).then_some(Shard(index))
    }
}

impl Default for ShardCount {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for ShardCount {
    type Error = ShardCountError;

    fn try_from(count: u32) -> Result<Self, ShardCountError> {
        Self::new(count)
    }
}

/// A shard count of 0, or above [`ShardCount::MAX`].
///
/// # Examples
///
/// ```
/// use tend::shard::ShardCount;
///
/// let error = ShardCount::new(100_000).unwrap_err();
/// assert_eq!(error.count, 100_000);
/// assert_eq!(error.to_string(), "a shard count must be between 1 and 65536, not 100000");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a shard count must be between 1 and 65536, not {count}")]
#[non_exhaustive]
pub struct ShardCountError {
    /// The count given.
    pub count: u32,
}

/// One shard: a number below its [`ShardCount`].
///
/// # Examples
///
/// ```
/// use tend::shard::ShardCount;
///
/// let shards = ShardCount::new(4)?;
/// let third = shards.shard(2).unwrap();
/// assert_eq!((third.index(), third.to_string()), (2, "shard-2".to_owned()));
/// assert_eq!(shards.shard(4), None); // not below the count
/// # Ok::<(), tend::shard::ShardCountError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(u32);

impl Shard {
    /// The shard's number.
    #[must_use]
    pub const fn index(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard-{}", self.0)
    }
}
