//! Planes: storing, ports, namespaces, the shared plane and paused clocks.

use super::*;

#[tokio::test]
async fn a_plane_stores_config_maps_through_its_client_and_its_kubeconfig() {
    let plane = plane(ControlPlane::builder()).await;
    assert!(
        plane.url().starts_with("https://127.0.0.1:"),
        "{}",
        plane.url()
    );
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, "stores")
        .await
        .expect("a namespace");
    assert!(namespace.starts_with("stores-"), "{namespace}");
    create_config_map(&client, &namespace, "greeting", "hello").await;

    // The kubeconfig file, read as any tool would, reaches the same data.
    let file = Kubeconfig::read_from(plane.kubeconfig_path()).expect("the kubeconfig parses");
    let from_file = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("a config"),
    )
    .expect("a client");
    assert_eq!(value_of(&from_file, &namespace, "greeting").await, "hello");

    let readyz = http::Request::get("/readyz").body(Vec::new()).unwrap();
    let answer = within("readyz", LIMIT, client.request_text(readyz)).await;
    assert_eq!(answer.expect("ready"), "ok");
}

#[tokio::test]
async fn planes_started_together_get_their_own_ports_and_data() {
    let (one, two) = tokio::join!(
        plane(ControlPlane::builder()),
        plane(ControlPlane::builder())
    );
    assert_ne!(one.url(), two.url());
    assert_ne!(one.etcd_url(), two.etcd_url());
    for (plane, value) in [(&one, "one"), (&two, "two")] {
        let client = plane.client().await.expect("a client");
        create_config_map(&client, "default", "owner", value).await;
    }
    for (plane, value) in [(&one, "one"), (&two, "two")] {
        let client = plane.client().await.expect("a client");
        assert_eq!(value_of(&client, "default", "owner").await, value);
    }
}

#[tokio::test]
async fn a_namespace_prefix_that_is_no_dns_label_is_refused() {
    let plane = shared().await;
    let client = plane.client().await.expect("a client");
    let refused = plane.create_namespace(&client, "Not_A_Label").await;
    assert!(
        matches!(refused, Err(HarnessError::Kube { .. })),
        "{refused:?}"
    );
}

/// Two tests on the shared plane, each on its own runtime: whichever runs
/// second uses a plane started on another runtime.
async fn use_the_shared_plane(prefix: &str) {
    let plane = shared().await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    create_config_map(&client, &namespace, "mine", prefix).await;
    assert_eq!(value_of(&client, &namespace, "mine").await, prefix);
}

#[tokio::test]
async fn the_shared_plane_serves_a_first_test() {
    use_the_shared_plane("first").await;
}

#[tokio::test]
async fn the_shared_plane_serves_a_second_test() {
    use_the_shared_plane("second").await;
}

/// Uses the shared plane on a runtime of a thread of its own, which then
/// ends; the API server's process id.
fn use_the_shared_plane_on_a_thread(prefix: &'static str) -> Option<u32> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            use_the_shared_plane(prefix).await;
            shared().await.apiserver_pid()
        })
    })
    .join()
    .expect("the thread")
}

#[test]
fn the_shared_plane_outlives_the_thread_and_runtime_that_started_it() {
    let first = use_the_shared_plane_on_a_thread("before");
    // That thread and its runtime are gone (on Linux, a process dies with
    // the thread that spawned it): the plane is not.
    let second = use_the_shared_plane_on_a_thread("after");
    assert_eq!(first, second, "the same API server process");
}

#[tokio::test(start_paused = true)]
async fn a_plane_starts_under_a_paused_clock() {
    // The harness's waits are its own: tokio's paused clock, which would
    // fire a probe's timeout at once, does not reach them.
    let plane = ControlPlane::start().await.expect("the plane starts");
    assert!(plane.apiserver_pid().is_some());
}
