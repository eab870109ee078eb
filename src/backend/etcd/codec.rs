//! How object keys map to etcd keys, and how stored values decode.

use std::fmt::Debug;

use serde::de::DeserializeOwned;

use crate::object::{Object, ObjectKey, Revision};

/// A key type that has a text form in etcd: the part of the etcd key after
/// the source's prefix.
///
/// Implemented for [`String`] (the text itself) and [`ObjectKey`]
/// (`namespace/name`, or `name` alone for an empty namespace). Implement it
/// for your own key types, or replace the whole mapping with a
/// [`KeyCodec`].
///
/// [`TextKeys`] stores only keys whose text parses back to the same key:
/// an [`ObjectKey`] with an empty name or a `/` in its namespace or name
/// (`ObjectKey::cluster("x/y")` would read back as namespace `x`, name
/// `y`) is refused with [`EncodeError::InvalidKey`].
///
/// # Examples
///
/// ```
/// use tend::etcd::EtcdKey;
///
/// /// A tenant's key, stored as `{region}.{id}`.
/// #[derive(Clone, Debug, PartialEq, Eq, Hash)]
/// struct Tenant { region: String, id: u32 }
///
/// impl EtcdKey for Tenant {
///     fn to_etcd_key(&self) -> String {
///         format!("{}.{}", self.region, self.id)
///     }
///
///     fn from_etcd_key(text: &str) -> Option<Self> {
///         let (region, id) = text.split_once('.')?;
///         Some(Self { region: region.to_owned(), id: id.parse().ok()? })
///     }
/// }
///
/// let tenant = Tenant { region: "eu".into(), id: 7 };
/// assert_eq!(tenant.to_etcd_key(), "eu.7");
/// assert_eq!(Tenant::from_etcd_key("eu.7"), Some(tenant));
/// assert_eq!(Tenant::from_etcd_key("eu"), None); // skipped by a source
/// ```
pub trait EtcdKey: Sized {
    /// The text form of this key.
    fn to_etcd_key(&self) -> String;

    /// Parses a text form back; `None` when `text` is not a valid key.
    fn from_etcd_key(text: &str) -> Option<Self>;
}

impl EtcdKey for String {
    fn to_etcd_key(&self) -> String {
        self.clone()
    }

    fn from_etcd_key(text: &str) -> Option<Self> {
        Some(text.to_owned())
    }
}

impl EtcdKey for ObjectKey {
    fn to_etcd_key(&self) -> String {
        self.to_string()
    }

    fn from_etcd_key(text: &str) -> Option<Self> {
        match text.split_once('/') {
            None if !text.is_empty() => Some(Self::cluster(text)),
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Some(Self::new(namespace, name))
            }
            _ => None,
        }
    }
}

/// Maps object keys to the bytes after a source's prefix, and back.
///
/// The default, [`TextKeys`], uses [`EtcdKey`]. Implement this trait when
/// the stored layout is not yours to choose (binary keys, a legacy scheme).
///
/// # Examples
///
/// Numeric ids stored as 8 big-endian bytes, so that etcd's key order is
/// the ids' order:
///
/// ```
/// use tend::etcd::{DecodeError, EncodeError, KeyCodec};
///
/// #[derive(Debug)]
/// struct BigEndian;
///
/// impl KeyCodec<u64> for BigEndian {
///     fn encode(&self, id: &u64) -> Result<Vec<u8>, EncodeError> {
///         Ok(id.to_be_bytes().to_vec())
///     }
///
///     fn decode(&self, suffix: &[u8]) -> Result<u64, DecodeError> {
///         let bytes = <[u8; 8]>::try_from(suffix)
///             .map_err(|_| DecodeError::InvalidKey { key: format!("{suffix:?}") })?;
///         Ok(u64::from_be_bytes(bytes))
///     }
/// }
///
/// assert_eq!(BigEndian.encode(&258)?, [0, 0, 0, 0, 0, 0, 1, 2]);
/// assert_eq!(BigEndian.decode(&[0, 0, 0, 0, 0, 0, 1, 2])?, 258);
/// assert!(BigEndian.decode(b"short").is_err());
/// // EtcdSource::builder_with_codec(name, client, prefix, BigEndian)
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyCodec<K>: Debug + Send + Sync + 'static {
    /// The bytes that follow the prefix for `key`.
    ///
    /// # Errors
    ///
    /// [`EncodeError`] when `key` cannot be stored (for instance because
    /// it would decode as another key); the write is refused.
    fn encode(&self, key: &K) -> Result<Vec<u8>, EncodeError>;

    /// The key stored under `suffix` (the bytes after the prefix).
    ///
    /// # Errors
    ///
    /// [`DecodeError`] (usually [`DecodeError::KeyNotUtf8`] or
    /// [`DecodeError::InvalidKey`]) when `suffix` is not a key of this
    /// codec; the entry is then skipped.
    fn decode(&self, suffix: &[u8]) -> Result<K, DecodeError>;
}

/// The default [`KeyCodec`]: the key's [`EtcdKey`] text, as UTF-8.
///
/// # Examples
///
/// ```
/// use tend::ObjectKey;
/// use tend::etcd::{EncodeError, KeyCodec, TextKeys};
///
/// assert_eq!(TextKeys.encode(&ObjectKey::new("shop", "web-1"))?, b"shop/web-1");
/// let decoded: ObjectKey = TextKeys.decode(b"node-0")?;
/// assert_eq!(decoded, ObjectKey::cluster("node-0"));
/// // A key whose text would read back as another key is refused:
/// let refused = TextKeys.encode(&ObjectKey::cluster("a/b"));
/// assert!(matches!(refused, Err(EncodeError::InvalidKey { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TextKeys;

impl<K: EtcdKey + PartialEq + 'static> KeyCodec<K> for TextKeys {
    fn encode(&self, key: &K) -> Result<Vec<u8>, EncodeError> {
        let text = key.to_etcd_key();
        if K::from_etcd_key(&text).as_ref() == Some(key) {
            Ok(text.into_bytes())
        } else {
            Err(EncodeError::InvalidKey { key: text })
        }
    }

    fn decode(&self, suffix: &[u8]) -> Result<K, DecodeError> {
        let text = std::str::from_utf8(suffix).map_err(|_| DecodeError::KeyNotUtf8)?;
        K::from_etcd_key(text).ok_or_else(|| DecodeError::InvalidKey {
            key: text.to_owned(),
        })
    }
}

/// Why a key could not be turned into an etcd key; nothing was written.
///
/// # Examples
///
/// ```
/// use tend::ObjectKey;
/// use tend::etcd::{EncodeError, KeyCodec, TextKeys};
///
/// let nameless = TextKeys.encode(&ObjectKey::new("shop", "")); // would read back as no key
/// assert_eq!(nameless, Err(EncodeError::InvalidKey { key: "shop/".into() }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The key has no etcd form (with [`TextKeys`]: its text would read
    /// back as another key, or as none).
    #[error("`{key}` cannot be stored as an etcd key")]
    InvalidKey {
        /// The key's text (or debug form).
        key: String,
    },
}

/// Why a stored entry could not be turned into an object; the entry is
/// skipped (and counted) until it is fixed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The etcd key is not UTF-8 text.
    #[error("key is not utf-8")]
    KeyNotUtf8,
    /// The key codec rejected the key.
    #[error("`{key}` is not a valid key")]
    InvalidKey {
        /// The key's text.
        key: String,
    },
    /// The value is larger than the source's limit.
    #[error("value of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The value's size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The value is not JSON of the object's type.
    #[error("value is not a valid object")]
    Value(#[source] serde_json::Error),
    /// The object decoded, but its own key differs from the etcd key it is
    /// stored under.
    #[error("object's key {object} differs from its etcd key {stored}")]
    KeyMismatch {
        /// The key the etcd key decodes to (debug form).
        stored: String,
        /// The key the object reports (debug form).
        object: String,
    },
}

/// Decodes one stored value under an already decoded key.
pub(super) fn decode_value<O>(
    key: &O::Key,
    value: &[u8],
    mod_revision: i64,
    limit: usize,
) -> Result<O, DecodeError>
where
    O: Object + DeserializeOwned,
{
    if value.len() > limit {
        return Err(DecodeError::TooLarge {
            size: value.len(),
            limit,
        });
    }
    let mut object: O = serde_json::from_slice(value).map_err(DecodeError::Value)?;
    if object.key() != *key {
        return Err(DecodeError::KeyMismatch {
            stored: format!("{key:?}"),
            object: format!("{:?}", object.key()),
        });
    }
    object.set_version(revision(mod_revision));
    Ok(object)
}

/// An etcd revision as a tend revision (etcd's are never negative).
pub(super) fn revision(raw: i64) -> Revision {
    Revision::new(u64::try_from(raw).unwrap_or(0))
}

/// What an object needs to be stored in etcd: an [`Object`](crate::Object)
/// that serde can encode and decode (as JSON). Implemented for every such
/// type.
///
/// # Examples
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tend::Revision;
/// use tend::etcd::EtcdObject;
///
/// #[derive(Clone, Debug, Serialize, Deserialize)]
/// struct Pod { name: String, #[serde(skip)] version: Revision } // the version is etcd's
/// tend::impl_object!(Pod, key: name: String, version: version);
///
/// fn storable<O: EtcdObject>() {}
/// storable::<Pod>(); // implemented already: nothing to write
/// ```
pub trait EtcdObject: crate::Object + serde::Serialize + serde::de::DeserializeOwned {}

impl<O> EtcdObject for O where O: crate::Object + serde::Serialize + serde::de::DeserializeOwned {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_round_trip_through_text() {
        for key in [ObjectKey::new("ns", "a"), ObjectKey::cluster("b")] {
            assert_eq!(ObjectKey::from_etcd_key(&key.to_etcd_key()), Some(key));
        }
        assert_eq!(ObjectKey::from_etcd_key(""), None);
        assert_eq!(ObjectKey::from_etcd_key("a/b/c"), None);
        assert_eq!(ObjectKey::from_etcd_key("/b"), None);
    }

    #[test]
    fn text_keys_refuse_keys_that_read_back_as_others() {
        for key in [
            ObjectKey::cluster("x/y"),
            ObjectKey::new("ns", "a/b"),
            ObjectKey::new("a/b", "c"),
            ObjectKey::cluster(""),
            ObjectKey::new("ns", ""),
        ] {
            assert!(
                matches!(TextKeys.encode(&key), Err(EncodeError::InvalidKey { .. })),
                "{key:?} is refused"
            );
        }
        assert_eq!(
            TextKeys.encode(&ObjectKey::new("ns", "a")),
            Ok(b"ns/a".to_vec())
        );
        assert_eq!(TextKeys.encode(&"a/b".to_owned()), Ok(b"a/b".to_vec()));
    }

    #[test]
    fn text_keys_reject_non_utf8() {
        let decoded: Result<String, _> = TextKeys.decode(&[0xff, 0xfe]);
        assert!(matches!(decoded, Err(DecodeError::KeyNotUtf8)));
    }

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Item {
        name: String,
        value: u64,
        #[serde(skip)]
        version: Revision,
    }
    crate::impl_object!(Item, key: name: String, version: version);

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn bad_bytes_never_panic_the_key_codecs(
            key in crate::fuzz::bytes_near(vec![b"ns/a".to_vec(), b"a".to_vec(), "n\u{e9}/b".as_bytes().to_vec()])
        ) {
            let text: Result<String, _> = TextKeys.decode(&key);
            let object: Result<ObjectKey, _> = TextKeys.decode(&key);
            // What decodes encodes back to the same bytes.
            if let Ok(decoded) = object {
                proptest::prop_assert_eq!(TextKeys.encode(&decoded), Ok(key.clone()));
            }
            proptest::prop_assert_eq!(text.is_ok(), std::str::from_utf8(&key).is_ok());
        }

        #[test]
        fn bad_bytes_never_panic_the_value_codec(
            value in crate::fuzz::bytes_near(vec![br#"{"name":"a","value":7}"#.to_vec()])
        ) {
            match decode_value::<Item>(&"a".to_owned(), &value, 12, 64) {
                Ok(item) => proptest::prop_assert_eq!((item.name.as_str(), item.version), ("a", Revision::new(12))),
                Err(DecodeError::TooLarge { size, .. }) => proptest::prop_assert!(size > 64),
                Err(_) => {}
            }
        }
    }
}
