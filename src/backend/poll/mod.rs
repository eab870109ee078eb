//! A [`Source`] over a system that can only be listed.
//!
//! Many real systems (cloud APIs, DNS, a thermostat's sensor) have no watch.
//! A [`PollSource`] calls a user function that lists every object, on an
//! interval (jittered by ±10 % so that many pollers do not synchronise),
//! diffs the result against the previous list and turns the differences into
//! [`Change`]s: new or changed objects are [`Change::Applied`], missing ones
//! [`Change::Deleted`]. It numbers its own revisions: each detected change
//! gets the next one, and unchanged objects keep their version, so the
//! informer sees each change once.
//!
//! When the list function fails, the watch stream keeps going: it logs the
//! error and retries after a backoff that doubles from the interval up to a
//! maximum ([`PollSource::with_max_backoff`]); the first success resets it.
//!
//! Objects are compared with `PartialEq` (after giving the new object the
//! old one's version), so the type must implement it.
//!
//! A `PollSource` keeps one previous snapshot: it serves one informer (the
//! manager shares one informer per source). A watch from any revision but
//! the latest fails with [`SourceError::Expired`], which makes the informer
//! list again.
//!
//! ```
//! use std::time::Duration;
//! use tend::poll::PollSource;
//! use tend::{Object, Revision};
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Record { name: String, ip: String, version: Revision }
//!
//! impl Object for Record {
//!     type Key = String;
//!     fn key(&self) -> String { self.name.clone() }
//!     fn version(&self) -> Revision { self.version }
//!     fn set_version(&mut self, version: Revision) { self.version = version; }
//! }
//!
//! let source = PollSource::new("dns", Duration::from_secs(30), || async {
//!     Ok::<_, std::io::Error>(vec![Record { name: "www".into(), ip: "10.0.0.1".into(), version: Revision::ZERO }])
//! })?;
//! # Ok::<(), tend::poll::PollConfigError>(())
//! ```
//!
//! [`Source`]: crate::Source
//! [`Change`]: crate::Change
//! [`Change::Applied`]: crate::Change::Applied
//! [`Change::Deleted`]: crate::Change::Deleted
//! [`SourceError::Expired`]: crate::SourceError::Expired

mod source;

pub use self::source::{PollConfigError, PollSource};
