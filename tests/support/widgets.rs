//! A tiny object type and helpers shared by the manager tests.

#![allow(dead_code, unreachable_pub)]

#[path = "wait.rs"]
mod wait;
#[allow(unused_imports)] // each test binary uses a different subset
pub use wait::{eventually, within};

use tend::Revision;
use tend::memory::MemoryStore;

/// A widget: just a name and a version.
#[derive(Debug, Clone, PartialEq)]
pub struct Widget {
    pub name: String,
    pub version: Revision,
}

tend::impl_object!(Widget, key: name: String, version: version);

/// A store holding widgets with the given names.
pub fn widgets(names: &[&str]) -> MemoryStore<Widget> {
    let store = MemoryStore::new("widgets");
    let client = store.client();
    for name in names {
        let widget = Widget {
            name: (*name).to_owned(),
            version: Revision::ZERO,
        };
        // The memory client completes at once: no runtime needed.
        futures::executor::block_on(client.create(widget)).expect("a fresh name");
    }
    store
}
