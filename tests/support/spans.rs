//! A tracing subscriber that records every span with its fields, for tests
//! of what the library reports (lighter than tracing-subscriber).

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span's fields, by name, as text (`Display` fields as displayed,
/// `Debug` ones as debugged).
pub type Fields = BTreeMap<String, String>;

/// The spans recorded so far, in creation order; clones share the record.
#[derive(Clone, Default)]
pub struct Spans {
    spans: Arc<Mutex<Vec<(&'static str, Fields)>>>,
}

impl Spans {
    /// The fields of every span named `name`, oldest first.
    pub fn named(&self, name: &str) -> Vec<Fields> {
        let spans = self.spans.lock().expect("not poisoned");
        spans
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields::new();
        span.record(&mut Visitor(&mut fields));
        let mut spans = self.spans.lock().expect("not poisoned");
        spans.push((span.metadata().name(), fields));
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().expect("not poisoned");
        let at = usize::try_from(span.into_u64() - 1).expect("an id we made");
        values.record(&mut Visitor(&mut spans[at].1));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
