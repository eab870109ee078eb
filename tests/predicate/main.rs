//! Predicates: the combinators and the built-in filters, on hand-made events.

mod metadata;
#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;

use support::Pod;
use tend::controller::Predicate;
use tend::{Event, Revision};

fn pod(name: &str, spec: u64) -> Arc<Pod> {
    Arc::new(Pod::new(name, "owner", spec))
}

/// `name starts with "a"` and `spec > 5`, on the four combinations.
fn named_a() -> Predicate<Pod> {
    Predicate::new(|event: &Event<Pod>| event.object().name.starts_with('a'))
}

fn big() -> Predicate<Pod> {
    Predicate::new(|event: &Event<Pod>| event.object().spec > 5)
}

/// Which of `a1`, `a9`, `b1`, `b9` (name, spec) `predicate` passes.
fn passes(predicate: &Predicate<Pod>) -> Vec<&'static str> {
    [("a1", 1), ("a9", 9), ("b1", 1), ("b9", 9)]
        .into_iter()
        .filter(|(name, spec)| predicate.matches(&Event::Initial(pod(name, *spec))))
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn and_passes_what_both_pass() {
    assert_eq!(passes(&named_a().and(big())), ["a9"]);
}

#[test]
fn or_passes_what_either_passes() {
    assert_eq!(passes(&named_a().or(big())), ["a1", "a9", "b9"]);
}

#[test]
fn not_passes_what_the_predicate_drops() {
    assert_eq!(passes(&!named_a()), ["b1", "b9"]);
    assert_eq!(passes(&!(named_a().or(big()))), ["b1"]);
}

/// `pod` at `version` and `generation`.
fn at(version: u64, generation: u64) -> Arc<Pod> {
    let mut pod = Pod::new("p", "owner", 1);
    pod.version = Revision::new(version);
    pod.generation = generation;
    Arc::new(pod)
}

fn update(old: Arc<Pod>, new: Arc<Pod>) -> Event<Pod> {
    Event::Applied {
        old: Some(old),
        new,
    }
}

/// Creations, deletions, initial lists and resyncs: never filtered.
fn not_updates() -> [Event<Pod>; 4] {
    [
        Event::Applied {
            old: None,
            new: at(1, 1),
        },
        Event::Initial(at(1, 1)),
        Event::Deleted(at(1, 1)),
        Event::Resync(at(1, 1)),
    ]
}

#[test]
fn version_changed_drops_only_updates_to_the_same_version() {
    let predicate = Predicate::version_changed();
    assert!(
        !predicate.matches(&update(at(3, 1), at(3, 1))),
        "a re-delivery"
    );
    assert!(
        predicate.matches(&update(at(3, 1), at(4, 1))),
        "a new version"
    );
    assert!(
        predicate.matches(&update(at(3, 1), at(4, 2))),
        "a new version and generation"
    );
    for event in not_updates() {
        assert!(predicate.matches(&event), "{event:?}");
    }
}

#[test]
fn generation_changed_drops_only_updates_of_the_same_generation() {
    let predicate = Predicate::generation_changed();
    assert!(
        !predicate.matches(&update(at(3, 1), at(4, 1))),
        "a status-only update"
    );
    assert!(
        predicate.matches(&update(at(3, 1), at(4, 2))),
        "a spec change"
    );
    for event in not_updates() {
        assert!(predicate.matches(&event), "{event:?}");
    }
}
