//! The boxed error of a backend's underlying system, and its chain for logs.

use std::error::Error as StdError;

/// A boxed error from a source's underlying system.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `error: source: source…` for logs.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
