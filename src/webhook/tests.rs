//! Unit tests of the webhook module.
