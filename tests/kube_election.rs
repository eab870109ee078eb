//! Leader election on a Kubernetes Lease against a real API server: one
//! leader among candidates, client-go's record, failover after a resign,
//! a crash (task or SIGKILLed process) and a deleted Lease, the local
//! deadline of a leader whose API access stalls or whose process is
//! stopped (SIGSTOP), and fenced writes.
//!
//! Needs kube-apiserver (`TEND_KUBE_APISERVER_BIN`) and etcd (see
//! `tend::testing::kube`). Real time: lease 3 s, renew deadline 2 s,
//! retry period 250 ms.

#![cfg(feature = "kube")]

#[path = "support/wait.rs"]
mod wait;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tend::ObjectKey;
use tend::client::{Client, ClientError, Fences, FencingToken};
use tend::election::{ElectionConfig, LeaderElector};
use tend::kube::{ElectionBuildError, KubeElection, KubeSource};
use tend::testing::Proxy;
use tend::testing::kube::ControlPlane;
use tokio::task::JoinSet;
use tokio::time::Instant;

use wait::within;

const LIMIT: Duration = Duration::from_secs(20);

/// The Lease every test's election uses (each test has its namespace).
const LEASE: &str = "leader";

fn fast() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(250),
    )
    .unwrap()
}

async fn plane() -> &'static ControlPlane {
    within(
        "the shared control plane",
        Duration::from_secs(90),
        ControlPlane::shared(),
    )
    .await
    .unwrap_or_else(|error| panic!("the shared control plane starts: {error}"))
}

/// A client and a fresh namespace on the shared plane.
async fn setup(prefix: &str) -> (kube::Client, String) {
    let plane = plane().await;
    let client = plane.client().await.expect("a client");
    let namespace = plane
        .create_namespace(&client, prefix)
        .await
        .expect("a namespace");
    (client, namespace)
}

fn candidate(client: kube::Client, namespace: &str, identity: &str) -> KubeElection {
    KubeElection::builder(client, namespace, LEASE)
        .identity(identity)
        .config(fast())
        .build()
        .expect("a valid candidate")
}

async fn lease(client: &kube::Client, namespace: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    within("reading the Lease", LIMIT, api.get(LEASE))
        .await
        .expect("the Lease exists")
}

/// Campaigns every candidate in a task of its own; each returns its index
/// and token once elected.
fn campaign_all(candidates: &[KubeElection]) -> JoinSet<(usize, FencingToken)> {
    let mut tasks = JoinSet::new();
    for (index, candidate) in candidates.iter().enumerate() {
        let candidate = candidate.clone();
        tasks.spawn(async move { (index, candidate.campaign().await.expect("a campaign")) });
    }
    tasks
}

/// The next candidate to win, within `limit`.
async fn next_winner(
    tasks: &mut JoinSet<(usize, FencingToken)>,
    what: &str,
    limit: Duration,
) -> (usize, FencingToken) {
    within(what, limit, tasks.join_next())
        .await
        .expect("a campaign is running")
        .expect("the campaign task did not panic")
}

/// A config map the fenced writes change.
async fn config_map(client: &kube::Client, namespace: &str) -> ObjectKey {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut map = ConfigMap::default();
    map.metadata.name = Some("acted".to_owned());
    within(
        "creating a config map",
        LIMIT,
        api.create(&PostParams::default(), &map),
    )
    .await
    .expect("the config map is created");
    ObjectKey::new(namespace, "acted")
}

/// Writes `value` into the config map through `client` (a read, then a
/// write); returns the map as written.
async fn act(
    client: &Client<ConfigMap>,
    key: &ObjectKey,
    value: &str,
) -> Result<ConfigMap, ClientError> {
    let value = value.to_owned();
    let change = move |map: &mut ConfigMap| {
        map.data = Some([("by".to_owned(), value.clone())].into());
    };
    within("a fenced write", LIMIT, client.modify(key, change))
        .await
        .map(|written| written.object)
}

/// Writes `map` back through `client`, without reading first (a read would
/// hang behind a blackholed proxy).
async fn write_back(client: &Client<ConfigMap>, map: &ConfigMap) -> Result<(), ClientError> {
    within("a fenced update", LIMIT, client.update(map.clone()))
        .await
        .map(drop)
}

#[test]
fn names_the_api_server_would_refuse_are_refused_when_building() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let build = |namespace: &str, name: &str, identity: &str| {
        KubeElection::builder(client.clone(), namespace, name)
            .identity(identity)
            .build()
            .map(drop)
    };
    assert!(matches!(
        build("default", "My_Lease", "a"),
        Err(ElectionBuildError::InvalidName { .. })
    ));
    assert!(matches!(
        build("kube.system", "lease", "a"),
        Err(ElectionBuildError::InvalidNamespace { .. })
    ));
    assert_eq!(
        build("default", "lease", ""),
        Err(ElectionBuildError::EmptyIdentity)
    );
    assert_eq!(build("default", "my-operator.example.com", "a"), Ok(()));
    let defaulted = KubeElection::builder(client.clone(), "default", "lease")
        .build()
        .unwrap();
    let other = KubeElection::builder(client, "default", "lease")
        .build()
        .unwrap();
    assert_ne!(
        defaulted.identity(),
        other.identity(),
        "default identities are unique"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_candidates_leads_and_keeps_leading_while_it_renews() {
    let (client, namespace) = setup("one-leader").await;
    let candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (winner, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    let first = lease(&client, &namespace).await;
    let spec = first.spec.clone().unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(candidates[winner].identity())
    );
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());

    // Twice the lease duration: the leader renews, nobody else wins.
    tokio::time::sleep(2 * fast().lease()).await;
    assert!(tasks.try_join_next().is_none(), "a second candidate won");
    let leaders: Vec<_> = candidates.iter().filter(|c| c.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    assert_eq!(leaders[0].token(), Some(token), "a renewal keeps the token");
    let renewed = lease(&client, &namespace).await.spec.unwrap();
    assert!(renewed.renew_time > spec.renew_time, "renewTime moves on");
    assert_eq!(renewed.acquire_time, spec.acquire_time, "acquireTime stays");
    assert_eq!(renewed.lease_transitions, Some(0));
    let leader = within("the leader's name", LIMIT, candidates[2].leader()).await;
    assert_eq!(
        leader.unwrap().as_deref(),
        Some(candidates[winner].identity())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_leader_is_followed_within_about_a_retry_period() {
    let (client, namespace) = setup("resign").await;
    let candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (first, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    let held = lease(&client, &namespace).await.spec.unwrap();

    let resigned = Instant::now();
    within("a resign", LIMIT, candidates[first].resign())
        .await
        .unwrap();
    assert!(!candidates[first].is_leader());
    within(
        "lost() after resign",
        Duration::from_millis(100),
        candidates[first].lost(),
    )
    .await;
    let bound = fast().retry_period() + Duration::from_millis(600);
    let (second, next) = next_winner(&mut tasks, "a leader after the resign", bound).await;
    eprintln!("resign to new leader: {:?}", resigned.elapsed());
    assert_ne!(first, second);
    assert!(next > token, "tokens grow: {next} after {token}");
    let taken = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(
        taken.holder_identity.as_deref(),
        Some(candidates[second].identity())
    );
    assert_eq!(taken.lease_transitions, Some(1));
    assert!(taken.acquire_time > held.acquire_time);
    // Resigning when not leading is harmless.
    within("a second resign", LIMIT, candidates[first].resign())
        .await
        .unwrap();
    assert!(candidates[second].is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_followed_within_the_lease_duration_and_a_second() {
    let (client, namespace) = setup("crash").await;
    let mut candidates: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|identity| candidate(client.clone(), &namespace, identity))
        .collect();
    let mut tasks = campaign_all(&candidates);
    let (first, token) = next_winner(&mut tasks, "a first leader", LIMIT).await;
    // Let the standbys observe a few renewals.
    tokio::time::sleep(Duration::from_millis(800)).await;

    // The crash: every handle dropped, so the renewals are aborted; no
    // resign.
    let fencing = candidates[first].fencing();
    drop(candidates.remove(first));
    let crashed = Instant::now();
    let bound = fast().lease() + Duration::from_secs(1);
    let (_, next) = next_winner(&mut tasks, "a leader after the crash", bound).await;
    let failover = crashed.elapsed();
    eprintln!("crash to new leader: {failover:?}");
    assert!(
        failover >= fast().renew_deadline(),
        "the Lease was taken before it expired"
    );
    assert!(next > token);
    assert!(!tend::client::Fencing::is_current(&fencing, token));
    let held = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(held.lease_transitions, Some(1));
}

/// A client from `kubeconfig`, sent to `server` instead of the API server's
/// own address when given (a proxy's `https://127.0.0.1:{port}`).
async fn client_for(kubeconfig: Kubeconfig, server: Option<&str>) -> kube::Client {
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a config");
    if let Some(server) = server {
        config.cluster_url = server.parse().expect("a server URL");
    }
    kube::Client::try_from(config).expect("a client")
}

/// A proxy in front of the plane's API server, and its URL.
async fn proxy() -> (Proxy, String) {
    let proxy = Proxy::start(apiserver_address().await).await.unwrap();
    let url = format!("https://{}", proxy.address());
    (proxy, url)
}

/// The API server's loopback address, from its URL `https://127.0.0.1:{port}`.
async fn apiserver_address() -> SocketAddr {
    let url = plane().await.url();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    format!("127.0.0.1:{port}").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leader_stops_acting_at_its_local_deadline_before_anyone_else_leads() {
    let (client, namespace) = setup("stall").await;
    let key = config_map(&client, &namespace).await;
    let (proxy, url) = proxy().await;
    let stalled = client_for(plane().await.kubeconfig(), Some(&url)).await;
    let a = candidate(stalled.clone(), &namespace, "a");
    let a_writes = KubeSource::<ConfigMap>::namespaced(stalled, &namespace).client_fenced_by(&a);
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let written = act(&a_writes.fenced(token), &key, "a")
        .await
        .expect("the leader writes");

    let b = candidate(client.clone(), &namespace, "b");
    let b_task = tokio::spawn({
        let b = b.clone();
        async move {
            let token = b.campaign().await.unwrap();
            (Instant::now(), token)
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cut = Instant::now();
    proxy.blackhole(true);
    within("a to notice its loss", LIMIT, a.lost()).await;
    let a_stopped = Instant::now();
    assert!(!a.is_leader());
    let refused = write_back(&a_writes.fenced(token), &written).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );

    let (b_won, b_token) = within("b to win", LIMIT, b_task).await.unwrap();
    eprintln!(
        "a stopped {:?} after the cut, b won {:?} after the cut",
        a_stopped - cut,
        b_won - cut
    );
    assert!(a_stopped < b_won, "the stalled leader stopped before b won");
    assert!(a_stopped - cut <= fast().renew_deadline() + Duration::from_millis(300));
    assert!(b_token > token);
    let b_writes = KubeSource::<ConfigMap>::namespaced(client, &namespace).client_fenced_by(&b);
    act(&b_writes.fenced(b_token), &key, "b")
        .await
        .expect("the new leader writes");
    // Healed, a is still out: its old token stays fenced.
    proxy.blackhole(false);
    let refused = write_back(&a_writes.fenced(token), &written).await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_deleted_loses_and_the_next_token_is_still_greater() {
    let (client, namespace) = setup("deleted").await;
    let a = candidate(client.clone(), &namespace, "a");
    let token = within("a to win", LIMIT, a.campaign()).await.unwrap();
    let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    within(
        "deleting the Lease",
        LIMIT,
        api.delete(LEASE, &DeleteParams::default()),
    )
    .await
    .unwrap();
    let bound = fast().retry_period() * 2 + Duration::from_millis(500);
    within("a to notice the Lease is gone", bound, a.lost()).await;
    let b = candidate(client.clone(), &namespace, "b");
    let next = within("b to win", LIMIT, b.campaign()).await.unwrap();
    assert!(
        next > token,
        "a re-created Lease's token {next} is above {token}"
    );
    let created = lease(&client, &namespace).await.spec.unwrap();
    assert_eq!(
        created.lease_transitions,
        Some(0),
        "leaseTransitions started over"
    );
}

// ---- Replicas as processes: SIGKILL and SIGSTOP ----

/// The replica process: campaigns, prints `LEADER <pid> <token>`, updates
/// its own config map through a fenced client every 100 ms (no read
/// first: it works from what it last wrote), and once a write is refused
/// prints `FENCED <pid>`, then `LOST <pid>` when `lost()` resolves. Runs
/// only when spawned, with the kubeconfig, namespace and (optionally) a
/// server URL in its environment.
#[test]
#[ignore = "run as a child process by the process tests"]
fn replica_process() {
    let (Ok(kubeconfig), Ok(namespace)) = (
        std::env::var("TEND_TEST_KUBECONFIG"),
        std::env::var("TEND_TEST_NAMESPACE"),
    ) else {
        return;
    };
    let server = std::env::var("TEND_TEST_SERVER").ok();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let file = Kubeconfig::read_from(kubeconfig).unwrap();
        let client = client_for(file, server.as_deref()).await;
        let pid = std::process::id();
        let election = candidate(client.clone(), &namespace, &format!("pid-{pid}"));
        let writes =
            KubeSource::<ConfigMap>::namespaced(client, &namespace).client_fenced_by(&election);
        let mut map = ConfigMap::default();
        map.metadata.name = Some(format!("acted-{pid}"));
        map.metadata.namespace = Some(namespace.clone());
        let mut map = writes.create(map).await.unwrap();
        let token = election.campaign().await.unwrap();
        println!("LEADER {pid} {token}");
        let writes = writes.fenced(token);
        loop {
            map.data = Some([("token".to_owned(), token.to_string())].into());
            match writes.update(map.clone()).await {
                Ok(written) => map = written,
                Err(ClientError::Fenced { .. }) => break,
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("FENCED {pid}");
        election.lost().await;
        println!("LOST {pid}");
    });
}

/// Replica processes, killed on drop (also when the test panics), and the
/// lines they print.
struct Replicas {
    children: Vec<Child>,
    lines: mpsc::Receiver<String>,
}

impl Replicas {
    /// One replica per entry of `servers`, each sent to its server (or to
    /// the API server when `None`).
    fn spawn(namespace: &str, kubeconfig: &std::path::Path, servers: &[Option<&str>]) -> Self {
        let (tx, lines) = mpsc::channel();
        let children = servers
            .iter()
            .map(|server| {
                let mut command = Command::new(std::env::current_exe().unwrap());
                command
                    .args(["replica_process", "--exact", "--ignored", "--nocapture"])
                    .env("TEND_TEST_KUBECONFIG", kubeconfig)
                    .env("TEND_TEST_NAMESPACE", namespace);
                if let Some(server) = server {
                    command.env("TEND_TEST_SERVER", server);
                }
                let mut child = command
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let stdout = child.stdout.take().unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        let ours = ["LEADER ", "FENCED ", "LOST "]
                            .iter()
                            .any(|p| line.starts_with(p));
                        if ours && tx.send(line).is_err() {
                            break;
                        }
                    }
                });
                child
            })
            .collect();
        Self { children, lines }
    }

    /// The next line starting with `word`, as `(pid, rest)`, within `limit`
    /// (other lines are skipped).
    fn next(&self, word: &str, limit: Duration) -> (u32, Option<u64>) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `{word}` line within {limit:?}"));
            let mut parts = line.split_whitespace();
            if parts.next() != Some(word) {
                continue;
            }
            let pid = parts.next().unwrap().parse().unwrap();
            return (pid, parts.next().map(|token| token.parse().unwrap()));
        }
    }

    fn signal(pid: u32, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("the kill command");
        assert!(status.success(), "kill {signal} {pid}");
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_processes_fail_over_within_the_lease_duration_and_a_second_after_sigkill() {
    let (_, namespace) = setup("sigkill").await;
    let kubeconfig = plane().await.kubeconfig_path();
    let mut replicas = Replicas::spawn(&namespace, kubeconfig, &[None, None, None]);
    tokio::task::block_in_place(|| {
        let (pid, token) = replicas.next("LEADER", LIMIT);
        let index = replicas
            .children
            .iter()
            .position(|c| c.id() == pid)
            .unwrap();
        std::thread::sleep(Duration::from_millis(800));
        let mut leader = replicas.children.remove(index);
        leader.kill().unwrap(); // SIGKILL: no resign, no clean-up
        leader.wait().unwrap();
        let killed = std::time::Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next, next_token) = replicas.next("LEADER", bound);
        eprintln!("SIGKILL to new leader: {:?}", killed.elapsed());
        assert_ne!(next, pid);
        assert!(next_token > token);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_leader_is_deposed_and_fenced_by_its_own_clock_when_it_resumes() {
    let (client, namespace) = setup("sigstop").await;
    // Each replica reaches the API server through a proxy of its own, so
    // that the stopped one can resume cut off: then nothing but its own
    // clock can tell it that it lost.
    let (proxies, urls): (Vec<_>, Vec<_>) = vec![proxy().await, proxy().await].into_iter().unzip();
    let servers: Vec<_> = urls.iter().map(|url| Some(url.as_str())).collect();
    let replicas = Replicas::spawn(&namespace, plane().await.kubeconfig_path(), &servers);
    let next = tokio::task::block_in_place(|| {
        let (paused, token) = replicas.next("LEADER", LIMIT);
        std::thread::sleep(Duration::from_millis(800));
        Replicas::signal(paused, "-STOP");
        let stopped = std::time::Instant::now();
        let bound = fast().lease() + Duration::from_secs(1);
        let (next, next_token) = replicas.next("LEADER", bound);
        eprintln!("SIGSTOP to new leader: {:?}", stopped.elapsed());
        assert_ne!(next, paused);
        assert!(next_token > token);

        // Resumed past its local deadline, cut off: its next write is
        // refused and `lost()` resolves, with no request answered.
        let index = replicas
            .children
            .iter()
            .position(|c| c.id() == paused)
            .unwrap();
        proxies[index].blackhole(true);
        let resumed = std::time::Instant::now();
        Replicas::signal(paused, "-CONT");
        assert_eq!(replicas.next("FENCED", Duration::from_secs(1)).0, paused);
        assert_eq!(replicas.next("LOST", Duration::from_secs(1)).0, paused);
        eprintln!("SIGCONT to fenced and lost: {:?}", resumed.elapsed());
        next
    });
    let holder = lease(&client, &namespace)
        .await
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(
        holder,
        Some(format!("pid-{next}")),
        "the new leader holds the Lease"
    );
}

/// Counts the reconciles of the replica it belongs to.
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl tend::controller::Reconciler<ConfigMap> for Counting {
    type Error = std::convert::Infallible;

    async fn reconcile(
        &self,
        _: tend::controller::Context<ConfigMap>,
    ) -> Result<tend::controller::Action, Self::Error> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(tend::controller::Action::Done)
    }
}

/// A manager leading through `election`, reconciling the maps of
/// `namespace`; its reconciles are counted in the returned counter.
fn replica(
    client: kube::Client,
    namespace: &str,
    election: KubeElection,
) -> (
    tend::manager::Manager,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let source = KubeSource::<ConfigMap>::namespaced(client, namespace);
    let mut manager = tend::manager::Manager::builder()
        .leader_election(election)
        .without_signals()
        .build()
        .expect("valid");
    let maps = manager
        .informer("configmaps", || tend::Informer::builder(source).build())
        .expect("registered");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let controller = manager
        .controller("maps", &maps, Counting(std::sync::Arc::clone(&count)))
        .build()
        .expect("valid");
    manager.add_controller(controller).expect("added");
    (manager, count)
}

#[tokio::test]
async fn a_manager_reconciles_only_while_its_lease_election_leads_and_a_standby_takes_over() {
    use std::sync::atomic::Ordering;
    let (client, ns) = setup("manager-lease").await;
    let maps = KubeSource::<ConfigMap>::namespaced(client.clone(), &ns).client();
    for name in ["a", "b", "c"] {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.to_owned());
        map.metadata.namespace = Some(ns.clone());
        maps.create(map).await.expect("created");
    }
    let (first, first_count) = replica(client.clone(), &ns, candidate(client.clone(), &ns, "one"));
    let first_stop = first.shutdown_token();
    let first_run = tokio::spawn(first.run());
    within("the first replica to reconcile", LIMIT, async {
        while first_count.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let (second, second_count) =
        replica(client.clone(), &ns, candidate(client.clone(), &ns, "two"));
    let second_stop = second.shutdown_token();
    let second_run = tokio::spawn(second.run());
    // Twice the lease: the standby's caches are warm, but it never leads.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        second_count.load(Ordering::Relaxed),
        0,
        "a standby reconciles nothing"
    );

    // The leader stops (and resigns): the standby takes over at once and
    // reconciles everything it now owns.
    let stopped = Instant::now();
    first_stop.cancel();
    within("the first replica to stop", LIMIT, first_run)
        .await
        .expect("joined")
        .expect("a clean stop");
    within("the standby to take over", LIMIT, async {
        while second_count.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "a resigned Lease is taken over within the retry period, not the lease: {:?}",
        stopped.elapsed()
    );
    second_stop.cancel();
    within("the second replica to stop", LIMIT, second_run)
        .await
        .expect("joined")
        .expect("a clean stop");
}
