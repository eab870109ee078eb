//! A ConfigMap controller written against `tend::kube`'s re-exports only
//! (no `kube` or `k8s-openapi` in Cargo.toml): it must build.

use std::convert::Infallible;

use tend::Informer;
use tend::controller::{Action, Context, Controller, Reconciler};
use tend::kube::k8s_openapi::api::core::v1::ConfigMap;
use tend::kube::kube::{Api, Client, ResourceExt};
use tend::kube::KubeSource;

struct Labeler;

impl Reconciler<ConfigMap> for Labeler {
    type Error = Infallible;

    async fn reconcile(&self, ctx: Context<ConfigMap>) -> Result<Action, Infallible> {
        if let Some(map) = ctx.object() {
            println!("{} has {} labels", map.name_any(), map.labels().len());
        }
        Ok(Action::Done)
    }
}

/// What an operator's `main` would run (under its own tokio runtime).
async fn operator() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    let _maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let informer = Informer::builder(KubeSource::<ConfigMap>::all(client)).build()?;
    let controller = Controller::builder("labeler", &informer, Labeler).build()?;
    drop(controller);
    Ok(())
}

fn main() {
    // Built, not run: there is no cluster in CI for this check.
    let _ = operator;
}
