//! The admin kubeconfig of a control plane, and clients made from it with
//! kube's own loader (its TLS setup, not one of ours).

use std::path::Path;

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use super::certs::Certs;
use crate::testing::HarnessError;

/// The names of the kubeconfig's one cluster, user and context.
const CLUSTER: &str = "tend-test";
const USER: &str = "admin";

/// A kubeconfig for `server` (`https://127.0.0.1:{port}`) as the admin
/// (`system:masters`), with absolute paths to the certificates.
pub(super) fn admin(server: &str, certs: &Certs) -> Kubeconfig {
    let path = |path: &Path| Some(path.display().to_string());
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: CLUSTER.to_owned(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority: path(&certs.ca),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: USER.to_owned(),
            auth_info: Some(AuthInfo {
                client_certificate: path(&certs.admin_cert),
                client_key: path(&certs.admin_key),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: CLUSTER.to_owned(),
            context: Some(Context {
                cluster: CLUSTER.to_owned(),
                user: Some(USER.to_owned()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(CLUSTER.to_owned()),
        kind: Some("Config".to_owned()),
        api_version: Some("v1".to_owned()),
        ..Kubeconfig::default()
    }
}

/// Writes `kubeconfig` to `path` as JSON (which is YAML too, so kubectl
/// and every kubeconfig loader read it).
pub(super) fn write(kubeconfig: &Kubeconfig, path: &Path) -> Result<(), HarnessError> {
    let doing = "writing the kubeconfig";
    let text = serde_json::to_string_pretty(kubeconfig)
        .map_err(|error| HarnessError::io(doing)(error.into()))?;
    std::fs::write(path, text).map_err(HarnessError::io(doing))
}

/// A client of `kubeconfig`'s current context, on the current tokio runtime.
pub(super) async fn client(kubeconfig: Kubeconfig) -> Result<kube::Client, HarnessError> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(HarnessError::Kubeconfig)?;
    kube::Client::try_from(config).map_err(|source| HarnessError::Kube {
        doing: "building a client",
        source,
    })
}
