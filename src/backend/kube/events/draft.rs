//! A published [`Occurrence`], checked against the API's rules: its identity
//! for aggregation, where it goes, and the `events.k8s.io/v1` object.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use super::{EventError, EventType, Occurrence, Reporter};
use crate::kube::names;

/// The API's limit on `reason`, `action` and `reportingInstance`, in bytes.
const MAX_FIELD: usize = 128;

/// The API's limit on `note`, in bytes.
const MAX_NOTE: usize = 1024;

/// The namespace of events about cluster-scoped objects (client-go's).
const CLUSTER_NAMESPACE: &str = "default";

/// What identifies an object for aggregation: every reference field but
/// `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectId([Option<String>; 6]);

impl ObjectId {
    fn of(reference: &ObjectReference) -> Self {
        Self([
            reference.api_version.clone(),
            reference.kind.clone(),
            reference.namespace.clone(),
            reference.name.clone(),
            reference.uid.clone(),
            reference.field_path.clone(),
        ])
    }
}

/// When two publishes are the same event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct EventKey {
    regarding: ObjectId,
    related: Option<ObjectId>,
    reason: String,
    action: String,
    type_: EventType,
    note: Option<String>,
}

/// An event ready to be written.
#[derive(Debug)]
pub(super) struct Draft {
    pub(super) key: EventKey,
    pub(super) namespace: String,
    regarding: ObjectReference,
    related: Option<ObjectReference>,
    reporter: Reporter,
}

impl Draft {
    /// `event` about `regarding`, checked.
    pub(super) fn new(
        regarding: &ObjectReference,
        event: &Occurrence,
        reporter: &Reporter,
    ) -> Result<Self, EventError> {
        check("reason", &event.reason)?;
        check("action", &event.action)?;
        check("reporting controller", &reporter.controller)?;
        check(
            "reporting instance",
            reporter.instance.as_deref().unwrap_or(""),
        )?;
        let note = event.note.as_deref().map(|note| truncated(note, MAX_NOTE));
        let namespace = regarding
            .namespace
            .clone()
            .filter(|namespace| !namespace.is_empty())
            .unwrap_or_else(|| CLUSTER_NAMESPACE.to_owned());
        Ok(Self {
            key: EventKey {
                regarding: ObjectId::of(regarding),
                related: event.secondary.as_ref().map(ObjectId::of),
                reason: event.reason.clone(),
                action: event.action.clone(),
                type_: event.type_,
                note: note.map(str::to_owned),
            },
            namespace,
            regarding: regarding.clone(),
            related: event.secondary.clone(),
            reporter: reporter.clone(),
        })
    }

    /// A new Event name: `{object name}.{hex nanoseconds}`, as client-go
    /// names them, unique within the process.
    pub(super) fn fresh_name(&self) -> String {
        let object = self.regarding.name.as_deref().unwrap_or("");
        event_name(object, unique_nanos())
    }

    /// The Event `name` recording the first occurrence.
    pub(super) fn event(&self, name: &str) -> KubeEvent {
        let key = &self.key;
        KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(Timestamp::now())),
            type_: Some(key.type_.as_str().to_owned()),
            reason: Some(key.reason.clone()),
            action: Some(key.action.clone()),
            note: key.note.clone(),
            regarding: Some(self.regarding.clone()),
            related: self.related.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            ..KubeEvent::default()
        }
    }
}

/// A required field of at most 128 bytes.
fn check(field: &'static str, value: &str) -> Result<(), EventError> {
    let problem = if value.is_empty() {
        "must not be empty"
    } else if value.len() > MAX_FIELD {
        "must be at most 128 bytes"
    } else {
        return Ok(());
    };
    Err(EventError::Invalid { field, problem })
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|&end| text.is_char_boundary(end))
        .unwrap_or(0);
    &text[..end]
}

/// A valid Event name for an event about `object` at `nanos`: the object's
/// name kept where Kubernetes allows it in a name (lower-case letters,
/// digits, `-`, `.`), else `event`.
fn event_name(object: &str, nanos: u64) -> String {
    let suffix = format!(".{nanos:x}");
    let keep = names::MAX_SUBDOMAIN - suffix.len();
    let prefix: String = object
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .take(keep)
        .collect();
    let name = format!("{prefix}{suffix}");
    if names::is_subdomain(&name) {
        name
    } else {
        format!("event{suffix}")
    }
}

/// Nanoseconds since the epoch, strictly increasing within the process.
fn unique_nanos() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        });
    let previous = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or(now);
    now.max(previous.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, action: &str) -> Occurrence {
        Occurrence {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: action.into(),
            secondary: None,
        }
    }

    fn reference(name: &str, version: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("ConfigMap".into()),
            name: Some(name.into()),
            namespace: Some("apps".into()),
            resource_version: Some(version.into()),
            ..ObjectReference::default()
        }
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "example.com/test".into(),
            instance: Some("replica-0".into()),
        }
    }

    #[test]
    fn required_fields_are_checked_before_sending() {
        let bad = [
            event("", "Act"),
            event("Reason", ""),
            event(&"r".repeat(129), "Act"),
        ];
        for event in bad {
            let error = Draft::new(&reference("a", "1"), &event, &reporter()).unwrap_err();
            assert!(matches!(error, EventError::Invalid { .. }), "{error}");
        }
        let nameless = Reporter::from("");
        assert!(Draft::new(&reference("a", "1"), &event("R", "A"), &nameless).is_err());
        assert!(
            Draft::new(
                &reference("a", "1"),
                &event(&"r".repeat(128), "A"),
                &reporter()
            )
            .is_ok()
        );
    }

    #[test]
    fn a_later_version_of_the_object_is_the_same_event() {
        let first = Draft::new(&reference("a", "1"), &event("R", "A"), &reporter()).unwrap();
        let later = Draft::new(&reference("a", "9"), &event("R", "A"), &reporter()).unwrap();
        let other = Draft::new(&reference("b", "1"), &event("R", "A"), &reporter()).unwrap();
        assert_eq!(first.key, later.key);
        assert_ne!(first.key, other.key);
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = truncated(&note, MAX_NOTE);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncated("short", MAX_NOTE), "short");
        assert_eq!(truncated("aé", 2), "a");
    }

    #[test]
    fn event_names_are_valid_and_unique() {
        assert_eq!(event_name("web-1", 255), "web-1.ff");
        assert_eq!(event_name("system:admin", 1), "system-admin.1");
        assert_eq!(event_name("", 1), "event.1");
        assert_eq!(event_name("-x", 1), "event.1");
        let long = event_name(&"a".repeat(300), u64::MAX);
        assert!(names::is_subdomain(&long) && long.len() == 253, "{long}");
        let (a, b) = (unique_nanos(), unique_nanos());
        assert!(b > a);
    }

    #[test]
    fn cluster_scoped_objects_get_their_events_in_default() {
        let mut node = reference("node-1", "1");
        node.namespace = None;
        let draft = Draft::new(&node, &event("R", "A"), &reporter()).unwrap();
        assert_eq!(draft.namespace, "default");
        let event = draft.event("node-1.1");
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.reporting_instance.as_deref(), Some("replica-0"));
        assert!(event.series.is_none());
    }
}
