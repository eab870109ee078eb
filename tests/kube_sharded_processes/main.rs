//! Three sharded replicas as separate processes on a real API server,
//! sharing 64 shards through `KubeMembership` (Leases only, no etcd of
//! their own), through rounds of SIGKILL, clean stops (SIGTERM), a replica
//! blackholed from the API server, and a replica paused (SIGSTOP) past its
//! lease: no ConfigMap is reconciled by two processes at once (from their
//! logs), every map converges after each round, and a lost replica's
//! shards are owned again within the lease and a second and a half (p50
//! and p99 printed).
//!
//! The replicas are this test binary run again with `kube_chaos_replica`
//! as its only test. Each reaches the API server through a [`Proxy`] of
//! its own, which the parent blackholes. `TEND_KUBE_CHAOS_ROUNDS` sets the
//! rounds (default 8, two of each).

#![cfg(feature = "kube")]

#[path = "../support/wait.rs"]
mod wait;

#[path = "../support/chaos_log.rs"]
mod chaos_log;

#[path = "../support/chaos_process.rs"]
mod chaos_process;

mod replica;
mod rounds;
mod world;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tend::election::ElectionConfig;
use tend::shard::ShardCount;

const GROUP: &str = "chaos";
const SHARDS: u32 = 64;

/// Lease 3 s, local deadline 2 s after a renewal, renewed every 250 ms.
fn timing() -> ElectionConfig {
    ElectionConfig::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(250),
    )
    .unwrap()
}

fn shards() -> ShardCount {
    ShardCount::new(SHARDS).unwrap()
}

/// A field of a map's data, empty when absent.
fn field<'a>(map: &'a ConfigMap, name: &str) -> &'a str {
    map.data
        .as_ref()
        .and_then(|data| data.get(name))
        .map_or("", String::as_str)
}

/// A client from the kubeconfig at `path`, sent to `server`.
async fn client_for(path: &Path, server: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("a kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a config");
    config.cluster_url = server.parse().expect("a server URL");
    kube::Client::try_from(config).expect("a client")
}

/// The replica process's entry point (see the module docs).
#[test]
#[ignore = "a replica process of the kube chaos test, started by it"]
fn kube_chaos_replica() {
    let Ok(id) = std::env::var("TEND_CHAOS_REPLICA") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let (kubeconfig, server, namespace, log) = (
        var("TEND_CHAOS_KUBECONFIG"),
        var("TEND_CHAOS_SERVER"),
        var("TEND_CHAOS_NAMESPACE"),
        var("TEND_CHAOS_LOG"),
    );
    // The parent holds this process's stdin: its end ends the replica.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let run = replica::replica(&id, kubeconfig.as_ref(), &server, &namespace, log.as_ref());
    let code = match runtime.block_on(run) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{}: {id} stopped: {error}", chaos_process::wall_ns());
            2
        }
    };
    std::process::exit(code);
}
