//! What the gallery's examples share: the `--duration N` / `--forever`
//! flags, the clock their logs are stamped with and their timeline, and
//! the summary they end with.

mod args;
mod summary;
mod timeline;

pub(crate) use args::run_for;
pub(crate) use summary::{Summary, verdict};
pub(crate) use timeline::{Clock, play};
