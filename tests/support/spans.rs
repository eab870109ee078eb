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

/// An event's target, and the name of the span it was logged in.
type Logged = (&'static str, Option<&'static str>);

/// The spans recorded so far, in creation order, and for each event the
/// span it was in; clones share the record. Entered spans are tracked as
/// one stack, for single-threaded tests.
#[derive(Clone, Default)]
pub struct Spans {
    spans: Arc<Mutex<Vec<(&'static str, Fields)>>>,
    entered: Arc<Mutex<Vec<Id>>>,
    events: Arc<Mutex<Vec<Logged>>>,
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

    /// How many events of `target` were logged inside a span named `name`
    /// (the span entered last).
    pub fn events_in(&self, target: &str, name: &str) -> usize {
        let events = self.events.lock().expect("not poisoned");
        events
            .iter()
            .filter(|event| **event == (target, Some(name)))
            .count()
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

    fn event(&self, event: &Event<'_>) {
        let inside = self.entered.lock().expect("not poisoned").last().cloned();
        let spans = self.spans.lock().expect("not poisoned");
        let name = inside.map(|id| spans[usize::try_from(id.into_u64() - 1).expect("ours")].0);
        let target = event.metadata().target();
        self.events
            .lock()
            .expect("not poisoned")
            .push((target, name));
    }

    fn enter(&self, span: &Id) {
        self.entered
            .lock()
            .expect("not poisoned")
            .push(span.clone());
    }

    fn exit(&self, span: &Id) {
        let mut entered = self.entered.lock().expect("not poisoned");
        if let Some(at) = entered.iter().rposition(|id| id == span) {
            entered.remove(at);
        }
    }
}
