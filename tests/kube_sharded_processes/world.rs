//! The parent's side: the maps it seeds and changes, the shard owners it
//! reads from the Leases, the replica processes and their proxies.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use tend::testing::Proxy;
use tokio::time::Instant;

use super::chaos_process::Process;
use super::{GROUP, field};

/// `request`'s answer within 10 s, or the test fails saying `what`.
async fn bounded<T>(what: &str, request: impl Future<Output = kube::Result<T>>) -> T {
    tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
        .unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// Each shard's owner (the member id of the session its Lease names).
pub(crate) async fn owners(leases: &Api<Lease>) -> BTreeMap<u32, String> {
    let prefix = format!("{GROUP}-shard-");
    let listed = leases
        .list(&ListParams::default())
        .await
        .expect("the Leases");
    listed
        .items
        .into_iter()
        .filter_map(|lease| {
            let index = lease
                .metadata
                .name
                .as_deref()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            let holder = lease.spec?.holder_identity.filter(|h| !h.is_empty())?;
            let id = holder
                .rsplit_once('/')
                .map_or(holder.as_str(), |(id, _)| id);
            Some((index, id.to_owned()))
        })
        .collect()
}

/// The shards `id` owns now.
pub(crate) async fn shards_of(leases: &Api<Lease>, id: &str) -> Vec<u32> {
    let owners = owners(leases).await;
    owners
        .into_iter()
        .filter(|(_, owner)| owner == id)
        .map(|(shard, _)| shard)
        .collect()
}

/// How long after `since` each of `theirs` was owned by another member.
pub(crate) async fn reowned(
    leases: &Api<Lease>,
    id: &str,
    theirs: Vec<u32>,
    since: Instant,
) -> Vec<Duration> {
    let mut waiting = theirs;
    let mut took = Vec::new();
    while !waiting.is_empty() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "shards {waiting:?} of {id} still unowned after {:?}",
            since.elapsed()
        );
        let owners = owners(leases).await;
        waiting.retain(|shard| match owners.get(shard) {
            Some(owner) if owner != id => {
                took.push(since.elapsed());
                false
            }
            _ => true,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took
}

/// Waits until every shard is owned and each of `ids` owns some.
pub(crate) async fn owned_by_all(leases: &Api<Lease>, ids: &[&str], shards: u32) {
    let started = Instant::now();
    loop {
        let owners = owners(leases).await;
        let all = owners.len() == usize::try_from(shards).unwrap();
        if all
            && ids
                .iter()
                .all(|id| owners.values().any(|owner| owner == id))
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the shards were not spread over {ids:?}: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates `keys` maps `item-{i}`, labelled, wanting `0`.
pub(crate) async fn seed(maps: &Api<ConfigMap>, namespace: &str, keys: usize) {
    let created = futures::stream::iter(0..keys)
        .map(|i| async move {
            let mut map = ConfigMap::default();
            map.metadata.name = Some(format!("item-{i}"));
            map.metadata.namespace = Some(namespace.to_owned());
            map.metadata.labels = Some([("tend.test/item".to_owned(), String::new())].into());
            map.data = Some([("want".to_owned(), "0".to_owned())].into());
            maps.create(&PostParams::default(), &map)
                .await
                .expect("seeded");
        })
        .buffer_unordered(32)
        .count()
        .await;
    assert_eq!(created, keys);
}

/// Sets `want` to `value` on `count` random maps (a merge patch: no
/// conflict with the replicas' stamps).
pub(crate) async fn bump(
    maps: &Api<ConfigMap>,
    rng: &mut u64,
    count: usize,
    keys: usize,
    value: usize,
) {
    for _ in 0..count {
        *rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let name = format!("item-{}", (*rng >> 33) % keys as u64);
        let patch = serde_json::json!({ "data": { "want": value.to_string() } });
        maps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("bumped");
    }
}

/// Waits until every map's `seen` is its `want`; returns how long it took.
pub(crate) async fn converge(maps: &Api<ConfigMap>, what: &str) -> Duration {
    let started = Instant::now();
    let items = ListParams::default().labels("tend.test/item");
    loop {
        let listed = bounded("listing the maps", maps.list(&items)).await;
        let behind = listed
            .items
            .iter()
            .filter(|map| field(map, "seen") != field(map, "want"))
            .count();
        if behind == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{behind} maps not converged 60 s after {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica: its process and the proxy all its requests go through.
pub(crate) struct Replica {
    pub(crate) process: Process,
    pub(crate) proxy: Proxy,
    kubeconfig: std::path::PathBuf,
    namespace: String,
}

impl Replica {
    pub(crate) async fn new(
        id: &'static str,
        dir: &Path,
        apiserver: std::net::SocketAddr,
        kubeconfig: &Path,
        namespace: &str,
    ) -> Self {
        Self {
            process: Process::new(id, dir.to_owned()),
            proxy: Proxy::start(apiserver).await.expect("a proxy"),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// Starts a new life of the replica process.
    pub(crate) fn start(&mut self) {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["kube_chaos_replica", "--exact", "--ignored", "--nocapture"])
            .env("TEND_CHAOS_KUBECONFIG", &self.kubeconfig)
            .env(
                "TEND_CHAOS_SERVER",
                format!("https://{}", self.proxy.address()),
            )
            .env("TEND_CHAOS_NAMESPACE", &self.namespace);
        self.process.start(command);
    }
}
