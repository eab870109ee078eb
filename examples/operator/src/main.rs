//! A custom-resource operator on tend: `Website`s (a CRD derived with
//! kube-rs's `#[derive(CustomResource)]`, with a status subresource and a
//! `Ready` condition) own pods; a finalizer removes each site's DNS record
//! before it goes; a validating webhook refuses invalid specs; events say
//! what the operator did; leader election on a Lease keeps one replica
//! acting.
//!
//! ```sh
//! # its own kube-apiserver and etcd (TEND_KUBE_APISERVER_BIN, etcd on PATH),
//! # a scenario, and a summary
//! cargo run --manifest-path examples/operator/Cargo.toml -- --embedded
//! # the operator against the cluster of your KUBECONFIG, until a signal;
//! # the webhook serves when given cert-manager's tls.crt and tls.key
//! cargo run --manifest-path examples/operator/Cargo.toml -- --namespace shop --cert-dir /tls
//! ```

mod admission;
mod install;
mod operator;
mod reconcile;
mod scenario;
#[path = "../../support/summary.rs"]
mod summary;
mod tls;
mod website;

use std::net::SocketAddr;
use std::path::PathBuf;

use operator::Serving;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str =
    "usage: operator --embedded | [--namespace NS] [--cert-dir DIR [--webhook-address ADDR]]";

/// The command line.
struct Args {
    embedded: bool,
    namespace: String,
    cert_dir: Option<PathBuf>,
    webhook_address: SocketAddr,
}

impl Args {
    fn parse() -> Result<Self, BoxError> {
        let mut args = Self {
            embedded: false,
            namespace: "default".to_owned(),
            cert_dir: None,
            webhook_address: "0.0.0.0:9443".parse()?,
        };
        let mut words = std::env::args().skip(1);
        while let Some(word) = words.next() {
            let mut value = || words.next().ok_or(USAGE);
            match word.as_str() {
                "--embedded" => args.embedded = true,
                "--namespace" => args.namespace = value()?,
                "--cert-dir" => args.cert_dir = Some(value()?.into()),
                "--webhook-address" => args.webhook_address = value()?.parse()?,
                _ => return Err(USAGE.into()),
            }
        }
        Ok(args)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse()?;
    if args.embedded {
        return scenario::run().await;
    }
    let client = kube::Client::try_default().await?;
    install::crd(&client).await?;
    let serving = args.cert_dir.map(|certificates| Serving {
        address: args.webhook_address,
        certificates,
    });
    // In a pod, its name: unique among the replicas.
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("website-operator-{}", std::process::id()));
    let operator = operator::build(&client, &args.namespace, &identity, serving)?;
    println!(
        "website operator {identity} in namespace {}: until a signal",
        args.namespace
    );
    operator.manager.run().await?;
    Ok(())
}
