//! The operator as it runs in a cluster: a manager with leader election
//! on a Lease, the `Website` controller owning pods (leader only), and the
//! validating webhook (on every replica: the API server calls whichever
//! its Service picks).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tend::Informer;
use tend::election::ElectionConfig;
use tend::kube::k8s_openapi::api::core::v1::Pod;
use tend::kube::{KubeElection, KubeSource, Recorder, Reporter};
use tend::manager::Manager;
use tend::webhook::{CertificateFiles, WebhookServer};

use crate::BoxError;
use crate::admission::{self, Reviews};
use crate::reconcile::{Counts, Dns, OWNER, Websites, owner_of};
use crate::website::Website;

/// Where the webhook serves, and the directory of its `tls.crt` and
/// `tls.key`.
pub struct Serving {
    pub address: SocketAddr,
    pub certificates: PathBuf,
}

/// One replica of the operator, ready to run.
pub struct Operator {
    pub manager: Manager,
    pub election: KubeElection,
    pub recorder: Recorder,
    pub counts: Arc<Counts>,
    pub reviews: Arc<Reviews>,
    pub dns: Dns,
    /// Where the webhook listens, when it serves.
    pub webhook: Option<SocketAddr>,
}

/// The operator `identity` over the websites of `namespace`.
pub fn build(
    client: &Client,
    namespace: &str,
    identity: &str,
    serving: Option<Serving>,
) -> Result<Operator, BoxError> {
    let secs = Duration::from_secs;
    let election = KubeElection::builder(client.clone(), namespace, "website-operator")
        .identity(identity)
        .config(ElectionConfig::new(secs(6), secs(4), secs(1))?)
        .build()?;
    let mut manager = Manager::builder()
        .leader_election(election.clone())
        .build()?;
    let reporter = Reporter {
        controller: "tend.example.com/website-operator".to_owned(),
        instance: Some(identity.to_owned()),
    };
    let recorder = Recorder::new(client.clone(), reporter).fenced_by(&election);
    let (counts, dns) = (Arc::new(Counts::default()), Dns::default());
    let websites = Websites {
        recorder: recorder.clone(),
        dns: dns.clone(),
        counts: Arc::clone(&counts),
    };
    controller(&mut manager, client, namespace, &election, websites)?;
    let reviews = Arc::new(Reviews::default());
    let webhook = match serving {
        Some(serving) => Some(serve(&mut manager, serving, Arc::clone(&reviews))?),
        None => None,
    };
    Ok(Operator {
        manager,
        election,
        recorder,
        counts,
        reviews,
        dns,
        webhook,
    })
}

/// The websites controller: it owns pods and writes both through clients
/// fenced by the election (a deposed leader's writes are refused).
fn controller(
    manager: &mut Manager,
    client: &Client,
    namespace: &str,
    election: &KubeElection,
    websites: Websites,
) -> Result<(), BoxError> {
    let site_source = KubeSource::<Website>::namespaced(client.clone(), namespace);
    let pod_source = KubeSource::<Pod>::namespaced(client.clone(), namespace).labels("website");
    let site_client = site_source.client_fenced_by(election);
    let pod_client = pod_source.client_fenced_by(election);
    let sites = manager.informer("websites", || Informer::builder(site_source).build())?;
    let pods = manager.informer("pods", || {
        Informer::builder(pod_source)
            .index(OWNER, |pod: &Pod| {
                owner_of(pod).map(|o| o.to_string()).into_iter().collect()
            })
            .build()
    })?;
    let controller = manager
        .controller("websites", &sites, websites)
        .owns(&pods, owner_of)
        .client(site_client)
        .client(pod_client)
        .build()?;
    manager.add_controller(controller)?;
    Ok(())
}

/// The webhook server, bound now (so its address is known), run by the
/// manager on every replica.
fn serve(
    manager: &mut Manager,
    serving: Serving,
    reviews: Arc<Reviews>,
) -> Result<SocketAddr, BoxError> {
    let server = WebhookServer::builder(
        serving.address,
        CertificateFiles::in_dir(&serving.certificates),
    )
    .route(admission::PATH, admission::validating(reviews))
    .metrics(manager.registry_mut())
    .build()?;
    let address = server.local_addr();
    manager.add_task("webhook", |stop| async move { Ok(server.run(stop).await?) })?;
    Ok(address)
}
