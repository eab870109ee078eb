//! Kubernetes Events from a `Recorder` against a real API server: the
//! fields the API stores, repeats aggregated into one Event's series
//! (also when published concurrently), distinct events kept apart, an
//! expired Event recorded anew, cluster-scoped objects, refusals; and
//! (`queued.rs`) fencing and the background queue of `emit`.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`).

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
mod wait;

mod queued;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Resource};
use tend::kube::{EventError, EventType, Occurrence, Recorder, Reporter};
use tend::testing::kube::ControlPlane;

use wait::within;

const LIMIT: Duration = Duration::from_secs(20);

/// A client, a fresh namespace on the shared plane, and a config map in
/// it to publish events about.
async fn setup(prefix: &str) -> (kube::Client, String, ObjectReference) {
    let plane = within(
        "the shared control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .unwrap_or_else(|error| panic!("the shared control plane starts: {error}"));
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let mut map = ConfigMap::default();
    map.metadata.name = Some("settings".to_owned());
    let map = within(
        "creating a config map",
        LIMIT,
        api.create(&PostParams::default(), &map),
    )
    .await
    .expect("the config map is created");
    (client, namespace, map.object_ref(&()))
}

fn recorder(client: &kube::Client) -> Recorder {
    let reporter = Reporter {
        controller: "example.com/tend-test".to_owned(),
        instance: Some("replica-0".to_owned()),
    };
    Recorder::new(client.clone(), reporter)
}

fn event(note: &str) -> Occurrence {
    Occurrence {
        type_: EventType::Normal,
        reason: "Reconciled".to_owned(),
        note: Some(note.to_owned()),
        action: "Reconcile".to_owned(),
        secondary: None,
    }
}

async fn publish(recorder: &Recorder, regarding: &ObjectReference, event: &Occurrence) {
    within("a publish", LIMIT, recorder.publish(regarding, event))
        .await
        .expect("the event is published");
}

/// The Events in `namespace`, oldest first.
async fn events(client: &kube::Client, namespace: &str) -> Vec<KubeEvent> {
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), namespace);
    let mut list = within("listing events", LIMIT, api.list(&ListParams::default()))
        .await
        .expect("the events")
        .items;
    list.sort_by(|a, b| a.event_time.cmp(&b.event_time));
    list
}

#[tokio::test]
async fn a_published_event_is_stored_with_its_fields_and_no_series() {
    let (client, namespace, regarding) = setup("fields").await;
    let secondary = ObjectReference {
        kind: Some("Secret".to_owned()),
        name: Some("token".to_owned()),
        namespace: Some(namespace.clone()),
        api_version: Some("v1".to_owned()),
        ..ObjectReference::default()
    };
    let warning = Occurrence {
        type_: EventType::Warning,
        secondary: Some(secondary.clone()),
        ..event("the settings are stale")
    };
    publish(&recorder(&client), &regarding, &warning).await;
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let stored = &stored[0];
    assert_eq!(stored.type_.as_deref(), Some("Warning"));
    assert_eq!(stored.reason.as_deref(), Some("Reconciled"));
    assert_eq!(stored.action.as_deref(), Some("Reconcile"));
    assert_eq!(stored.note.as_deref(), Some("the settings are stale"));
    assert_eq!(
        stored.reporting_controller.as_deref(),
        Some("example.com/tend-test")
    );
    assert_eq!(stored.reporting_instance.as_deref(), Some("replica-0"));
    assert_eq!(stored.regarding.as_ref(), Some(&regarding));
    assert_eq!(stored.related.as_ref(), Some(&secondary));
    assert!(stored.event_time.is_some());
    assert!(stored.series.is_none(), "a first occurrence has no series");
    let name = stored.metadata.name.as_deref().unwrap();
    assert!(name.starts_with("settings."), "{name}");
}

#[tokio::test]
async fn five_repeats_are_one_event_with_a_series_of_five() {
    let (client, namespace, regarding) = setup("repeats").await;
    let recorder = recorder(&client);
    for _ in 0..5 {
        publish(&recorder, &regarding, &event("resynced")).await;
    }
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let series = stored[0].series.as_ref().expect("a series");
    assert_eq!(series.count, 5);
    assert!(Some(&series.last_observed_time) >= stored[0].event_time.as_ref());
}

#[tokio::test]
async fn concurrent_repeats_are_one_event_counting_every_one() {
    let (client, namespace, regarding) = setup("concurrent").await;
    let recorder = recorder(&client);
    let note = event("resynced");
    let publishes = (0..10).map(|_| recorder.publish(&regarding, &note));
    let results = within("ten publishes", LIMIT, futures::future::join_all(publishes)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].series.as_ref().map(|s| s.count), Some(10));
}

#[tokio::test]
async fn different_notes_reasons_or_objects_are_separate_events() {
    let (client, namespace, regarding) = setup("distinct").await;
    let recorder = recorder(&client);
    publish(&recorder, &regarding, &event("first")).await;
    publish(&recorder, &regarding, &event("second")).await;
    let other_reason = Occurrence {
        reason: "Drifted".to_owned(),
        ..event("first")
    };
    publish(&recorder, &regarding, &other_reason).await;
    let other_object = ObjectReference {
        name: Some("other".to_owned()),
        uid: None,
        ..regarding.clone()
    };
    publish(&recorder, &other_object, &event("first")).await;
    // A later version of the same object is the same event.
    let later = ObjectReference {
        resource_version: Some("999999".to_owned()),
        ..regarding.clone()
    };
    publish(&recorder, &later, &event("first")).await;
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 4, "{stored:?}");
    let counts: Vec<_> = stored
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .collect();
    assert_eq!(counts, [2, 1, 1, 1]);
}

#[tokio::test]
async fn a_zero_window_never_aggregates() {
    let (client, namespace, regarding) = setup("no-window").await;
    let recorder = recorder(&client).window(Duration::ZERO);
    publish(&recorder, &regarding, &event("resynced")).await;
    publish(&recorder, &regarding, &event("resynced")).await;
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|e| e.series.is_none()));
}

#[tokio::test]
async fn an_event_deleted_on_the_server_is_recorded_anew() {
    let (client, namespace, regarding) = setup("expired").await;
    let recorder = recorder(&client);
    publish(&recorder, &regarding, &event("resynced")).await;
    let first = events(&client, &namespace).await.remove(0);
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), &namespace);
    let name = first.metadata.name.clone().unwrap();
    within(
        "deleting the event",
        LIMIT,
        api.delete(&name, &DeleteParams::default()),
    )
    .await
    .unwrap();
    publish(&recorder, &regarding, &event("resynced")).await;
    let stored = events(&client, &namespace).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_ne!(stored[0].metadata.name.as_deref(), Some(name.as_str()));
    assert!(stored[0].series.is_none());
    // And it aggregates again from there.
    publish(&recorder, &regarding, &event("resynced")).await;
    let stored = events(&client, &namespace).await;
    assert_eq!(stored[0].series.as_ref().map(|s| s.count), Some(2));
}

#[tokio::test]
async fn events_about_a_cluster_scoped_object_go_to_default() {
    let (client, namespace, _) = setup("cluster").await;
    let api: Api<Namespace> = Api::all(client.clone());
    let object = within("reading the namespace", LIMIT, api.get(&namespace))
        .await
        .unwrap();
    let unique = format!("about namespace {namespace}");
    publish(&recorder(&client), &object.object_ref(&()), &event(&unique)).await;
    let found = events(&client, "default")
        .await
        .into_iter()
        .any(|e| e.note.as_deref() == Some(unique.as_str()));
    assert!(found, "no event in `default` about the namespace");
}

#[tokio::test]
async fn bad_fields_are_refused_before_sending_and_bad_reporters_by_the_server() {
    let (client, _, regarding) = setup("refused").await;
    let nameless = Occurrence {
        reason: String::new(),
        ..event("x")
    };
    let refused = recorder(&client).publish(&regarding, &nameless).await;
    assert!(
        matches!(
            refused,
            Err(EventError::Invalid {
                field: "reason",
                ..
            })
        ),
        "{refused:?}"
    );
    let bad = Recorder::new(client.clone(), "Not A Qualified Name!");
    let refused = within("a publish", LIMIT, bad.publish(&regarding, &event("x"))).await;
    assert!(
        matches!(refused, Err(EventError::Rejected { .. })),
        "{refused:?}"
    );
    // The failed create is forgotten: the next publish tries again.
    let refused = within("a publish", LIMIT, bad.publish(&regarding, &event("x"))).await;
    assert!(
        matches!(refused, Err(EventError::Rejected { .. })),
        "{refused:?}"
    );
}
