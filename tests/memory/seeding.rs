//! Seeding with create, with and without a runtime.

use super::*;

/// Seeding without a runtime: `create` checks what a client's create
/// checks (the key must be free), unlike `put`, which replaces.
#[test]
fn create_seeds_without_a_runtime_and_refuses_an_existing_key() {
    let store = store();
    let stored = store
        .create(Pod::new("web-1", "web", 1))
        .expect("a free key");
    assert_eq!(stored.version, store.revision());
    let again = store.create(Pod::new("web-1", "web", 2));
    assert!(
        matches!(&again, Err(error) if error.is_already_exists()),
        "{again:?}"
    );
    assert_eq!(
        store.get(&"web-1".to_owned()).map(|p| p.spec),
        Some(1),
        "nothing replaced"
    );
    store.put(Pod::new("web-1", "web", 3));
    assert_eq!(
        store.get(&"web-1".to_owned()).map(|p| p.spec),
        Some(3),
        "put replaces"
    );
}

/// Inside a runtime too: the memory client's calls complete at once.
#[tokio::test]
async fn create_seeds_inside_a_runtime() {
    let store = store();
    store
        .create(Pod::new("web-1", "web", 1))
        .expect("a free key");
    let listed = store.client().list().await.expect("listed");
    assert_eq!(listed.objects.len(), 1);
}

/// Inside another executor too: seeding enters none of its own.
#[test]
fn create_seeds_inside_another_executor() {
    let store = store();
    futures::executor::block_on(async {
        store
            .create(Pod::new("web-1", "web", 1))
            .expect("a free key");
    });
    assert_eq!(store.len(), 1);
}
