//! Memory and sync time over Pods shaped like a real cluster's (two
//! containers with env, probes, mounts and resources, three volumes, an
//! owner, a running status and the `managedFields` the API server keeps),
//! at 10,000 and 50,000 Pods on the real API server of
//! `tend::testing::kube`: kube-runtime's `Controller` (its reflector's
//! store) and tend's, each with default settings, with a transform that
//! drops `managedFields`, and metadata-only.
//!
//! Each measurement is a process of its own (this binary with `--child`),
//! so that its resident set is its own: the time until every Pod was
//! reconciled once, then, after a second of rest, its RSS (settled and
//! peak, above a process that only made a client) and its heap (live and
//! peak, above the heap before the controller started), per Pod.
//!
//! ```sh
//! TEND_KUBE_APISERVER_BIN=… cargo run --release --manifest-path benches/kube_runtime/Cargo.toml --bin pods
//! ```
//! `--local` measures, in process and without a server, what tend's
//! informer and controller hold per Pod beyond the Pods themselves.
//! `TEND_PODS_SIZES=10000,50000` sets the sizes, `TEND_PODS_CONFIGS` (a
//! comma-separated list of the names below) the runtimes.

mod child;
mod local;
mod shape;

use std::process::Command;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tend::testing::kube::ControlPlane;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a child measures: the runtime and its settings.
const CONFIGS: [&str; 8] = [
    "baseline",
    "kube-runtime",
    "kube-runtime-transform",
    "kube-runtime-metadata",
    "tend",
    "tend-paged",
    "tend-transform",
    "tend-metadata",
];

/// One child's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    sync: f64,
    rss: f64,
    rss_peak: f64,
    heap: f64,
    heap_peak: f64,
}

/// Creates pods `from..to` in `namespace`, then writes each one's status.
async fn seed(pods: &Api<Pod>, namespace: &str, from: usize, to: usize) -> Result<(), BoxError> {
    let results: Vec<Result<(), kube::Error>> = futures::stream::iter(from..to)
        .map(|i| {
            let pods = pods.clone();
            let pod = shape::pod(namespace, i);
            async move {
                let created = pods.create(&PostParams::default(), &pod).await?;
                let name = created.metadata.name.unwrap_or_default();
                let status = serde_json::json!({ "status": shape::status(i) });
                let params = PatchParams::apply("kubelet").force();
                pods.patch_status(
                    &name,
                    &params,
                    &Patch::Apply(&serde_json::json!({
                        "apiVersion": "v1", "kind": "Pod", "status": status["status"],
                    })),
                )
                .await
                .map(drop)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(())
}

/// Runs one child measuring `config` over `count` pods.
fn measure(config: &str, kubeconfig: &std::path::Path, namespace: &str, count: usize) -> Figures {
    let output = Command::new(std::env::current_exe().expect("this binary"))
        .args(["--child", config, namespace, &count.to_string()])
        .arg(kubeconfig)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "{config}: no result: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let numbers: Vec<f64> = line
        .split(' ')
        .map(|n| n.parse().expect("a number"))
        .collect();
    Figures {
        sync: numbers[0],
        rss: numbers[1],
        rss_peak: numbers[2],
        heap: numbers[3],
        heap_peak: numbers[4],
    }
}

fn print_table(count: usize, figures: &[(&str, Figures)]) {
    let baseline = figures[0].1;
    let per = |bytes: f64| bytes / count as f64;
    println!(
        "\n{count} Pods (per Pod: above a process that only made a client; heap above the heap before the controller started)"
    );
    println!("| runtime | sync | RSS settled | RSS peak | heap settled | heap peak |");
    println!("|---|---|---|---|---|---|");
    for (config, f) in &figures[1..] {
        println!(
            "| {config} | {:.2} s | {:.0} B | {:.0} B | {:.0} B | {:.0} B |",
            f.sync,
            per(f.rss - baseline.rss),
            per(f.rss_peak - baseline.rss),
            per(f.heap),
            per(f.heap_peak),
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--local") {
        local::run(10_000, true).await;
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("--child") {
        child::run(&args[2], &args[3], args[4].parse()?, args[5].as_ref()).await;
        return Ok(());
    }
    let sizes: Vec<usize> = std::env::var("TEND_PODS_SIZES")
        .unwrap_or_else(|_| "10000,50000".into())
        .split(',')
        .map(|n| n.parse().expect("a size"))
        .collect();
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    let namespace = plane.create_namespace(&client, "pods").await?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let mut seeded = 0;
    for size in sizes {
        let started = Instant::now();
        seed(&pods, &namespace, seeded, size).await?;
        seeded = size;
        println!(
            "seeded {size} Pods ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        let only = std::env::var("TEND_PODS_CONFIGS").unwrap_or_default();
        let figures: Vec<(&str, Figures)> = CONFIGS
            .iter()
            .filter(|config| {
                only.is_empty() || **config == "baseline" || only.split(',').any(|o| o == **config)
            })
            .map(|config| {
                (
                    *config,
                    measure(config, plane.kubeconfig_path(), &namespace, size),
                )
            })
            .collect();
        print_table(size, &figures);
    }
    Ok(())
}
