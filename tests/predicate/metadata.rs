//! The metadata predicates (labels, annotations, finalizers, deletion, a
//! label selector), each on creations, updates and deletions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tend::controller::Predicate;
use tend::{Deletion, Event, LabelSelector, Lifecycle, Object, Revision};

#[derive(Debug, Clone, Default)]
struct Tagged {
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    lifecycle: Lifecycle,
    version: Revision,
}

impl Object for Tagged {
    type Key = String;
    fn key(&self) -> String {
        "t".to_owned()
    }
    fn version(&self) -> Revision {
        self.version
    }
    fn set_version(&mut self, version: Revision) {
        self.version = version;
    }
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_ref()
    }
    fn annotations(&self) -> Option<&BTreeMap<String, String>> {
        self.annotations.as_ref()
    }
    fn lifecycle(&self) -> Option<&Lifecycle> {
        Some(&self.lifecycle)
    }
    fn lifecycle_mut(&mut self) -> Option<&mut Lifecycle> {
        Some(&mut self.lifecycle)
    }
}

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn labelled(pairs: &[(&str, &str)]) -> Tagged {
    Tagged {
        labels: map(pairs),
        ..Tagged::default()
    }
}

fn annotated(pairs: &[(&str, &str)]) -> Tagged {
    Tagged {
        annotations: map(pairs),
        ..Tagged::default()
    }
}

fn with_finalizers(names: &[&str], deleting: bool) -> Tagged {
    let mut tagged = Tagged::default();
    for name in names {
        tagged.lifecycle.add_finalizer(name);
    }
    if deleting {
        let deletion = Deletion::new(SystemTime::UNIX_EPOCH);
        tagged.lifecycle.set_deletion(Some(deletion));
    }
    tagged
}

fn update(old: &Tagged, new: &Tagged) -> Event<Tagged> {
    Event::Applied {
        old: Some(Arc::new(old.clone())),
        new: Arc::new(new.clone()),
    }
}

/// A creation, a deletion, an initial list and a resync of `object`.
fn not_updates(object: &Tagged) -> [Event<Tagged>; 4] {
    let object = Arc::new(object.clone());
    [
        Event::Applied {
            old: None,
            new: Arc::clone(&object),
        },
        Event::Deleted(Arc::clone(&object)),
        Event::Initial(Arc::clone(&object)),
        Event::Resync(object),
    ]
}

/// `predicate` passes the update `old → new` as `expected` says, and every
/// creation, deletion, list and resync of either state.
fn check_update_filter(predicate: &Predicate<Tagged>, old: &Tagged, new: &Tagged, expected: bool) {
    let event = update(old, new);
    assert_eq!(predicate.matches(&event), expected, "{event:?}");
    for event in not_updates(old).into_iter().chain(not_updates(new)) {
        assert!(predicate.matches(&event), "not an update: {event:?}");
    }
}

#[test]
fn labels_changed_passes_updates_whose_labels_differ() {
    let predicate = Predicate::labels_changed();
    let (web, api) = (labelled(&[("app", "web")]), labelled(&[("app", "api")]));
    check_update_filter(&predicate, &web, &api, true);
    check_update_filter(&predicate, &web, &labelled(&[]), true);
    check_update_filter(&predicate, &web, &web, false);
    check_update_filter(&predicate, &Tagged::default(), &labelled(&[]), false);
    check_update_filter(&predicate, &web, &annotated(&[("app", "web")]), true);
}

#[test]
fn annotations_changed_passes_updates_whose_annotations_differ() {
    let predicate = Predicate::annotations_changed();
    let (one, two) = (annotated(&[("note", "1")]), annotated(&[("note", "2")]));
    check_update_filter(&predicate, &one, &two, true);
    check_update_filter(&predicate, &one, &one, false);
    check_update_filter(&predicate, &Tagged::default(), &annotated(&[]), false);
    check_update_filter(&predicate, &labelled(&[("a", "1")]), &labelled(&[]), false);
}

#[test]
fn finalizers_changed_passes_updates_whose_finalizers_differ() {
    let predicate = Predicate::finalizers_changed();
    let (none, one) = (with_finalizers(&[], false), with_finalizers(&["a"], false));
    check_update_filter(&predicate, &none, &one, true);
    check_update_filter(&predicate, &one, &none, true);
    let (ab, ba) = (
        with_finalizers(&["a", "b"], false),
        with_finalizers(&["b", "a"], false),
    );
    check_update_filter(&predicate, &ab, &ba, true);
    check_update_filter(&predicate, &one, &with_finalizers(&["a"], true), false);
}

#[test]
fn deletion_started_passes_only_the_update_that_marks_the_object() {
    let predicate = Predicate::deletion_started();
    let (live, marked) = (
        with_finalizers(&["a"], false),
        with_finalizers(&["a"], true),
    );
    check_update_filter(&predicate, &live, &marked, true);
    check_update_filter(
        &predicate,
        &marked,
        &with_finalizers(&["a", "b"], true),
        false,
    );
    check_update_filter(&predicate, &live, &with_finalizers(&[], false), false);
}

#[test]
fn a_label_selector_filters_every_event_and_sees_an_object_leave() {
    let selector: LabelSelector = "app=web".parse().expect("valid");
    let predicate = Predicate::label_selector(selector);
    let (web, api) = (labelled(&[("app", "web")]), labelled(&[("app", "api")]));
    for event in not_updates(&web) {
        assert!(predicate.matches(&event), "selected: {event:?}");
    }
    for event in not_updates(&api)
        .into_iter()
        .chain(not_updates(&Tagged::default()))
    {
        assert!(!predicate.matches(&event), "not selected: {event:?}");
    }
    assert!(predicate.matches(&update(&web, &web)));
    assert!(predicate.matches(&update(&api, &web)), "joining");
    assert!(predicate.matches(&update(&web, &api)), "leaving");
    assert!(!predicate.matches(&update(&api, &api)));
}
