//! `--embedded`: a real API server of its own (`tend::testing::kube`),
//! the CRD and the webhook installed, one replica of the operator, and a
//! scenario: two websites created, one scaled, an invalid one refused, one
//! deleted with its cleanup; then a summary read from the API server.

use kube::Client;
use kube::api::{Api, ListParams};
use tend::client::Client as Writes;
use tend::kube::KubeSource;
use tend::kube::k8s_openapi::api::core::v1::Pod;
use tend::kube::k8s_openapi::api::events::v1::Event;
use tend::testing::kube::ControlPlane;
use tend::{Object, ObjectKey, Source};

use crate::operator::{self, Operator, Serving};
use crate::reconcile::{Dns, owner_of};
use crate::summary::{Summary, verdict};
use crate::website::{Website, WebsiteSpec};
use crate::{BoxError, admission, install, tls};

const NAMESPACE: &str = "tend-demo";

/// Runs the scenario and prints its summary.
pub async fn run() -> Result<(), BoxError> {
    println!("starting kube-apiserver and etcd on loopback …");
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    install::namespace(&client, NAMESPACE).await?;
    install::crd(&client).await?;
    let certificates = tempfile::tempdir()?;
    let ca = tls::issue(certificates.path())?;
    let serving = Serving {
        address: "127.0.0.1:0".parse()?,
        certificates: certificates.path().to_owned(),
    };
    let Operator {
        manager,
        election,
        recorder,
        counts,
        reviews,
        dns,
        webhook,
    } = operator::build(&client, NAMESPACE, "website-operator-0", Some(serving))?;
    let stop = manager.shutdown_token();
    let running = tokio::spawn(manager.run());
    let url = format!(
        "https://{}{}",
        webhook.ok_or("the webhook serves")?,
        admission::PATH
    );
    install::webhook(&client, NAMESPACE, url, &ca).await?;
    println!("operator running, webhook registered");
    let refused = drive(&client, &dns).await?;
    recorder.flush().await;
    let leader = election.leader().await?.unwrap_or_default();
    stop.cancel();
    running.await??;
    let live = Live::read(&client, &dns).await?;
    let events = count_events(&client).await?;
    let stats = recorder.emit_stats();
    let summary = Summary::default()
        .line(format!(
            "leader: {leader} (Lease {NAMESPACE}/website-operator)"
        ))
        .line(counts.line())
        .line(format!(
            "webhook: {} reviews, {} denied (its readiness probe, broken): {refused}",
            reviews.answered(),
            reviews.denied()
        ))
        .line(format!(
            "events: {events} on the API server ({} sent, {} dropped)",
            stats.published, stats.dropped_full
        ))
        .line(live.line());
    println!("{summary}");
    Ok(())
}

/// Create, scale, refuse, delete; returns the refusal's message.
async fn drive(client: &Client, dns: &Dns) -> Result<String, BoxError> {
    let sites = KubeSource::<Website>::namespaced(client.clone(), NAMESPACE).client();
    for (name, replicas) in [("blog", 2), ("shop", 3)] {
        println!("create   Website {name} wants {replicas} pods");
        sites.create(website(name, replicas)).await?;
    }
    settled(client, "blog", 2).await?;
    settled(client, "shop", 3).await?;
    println!("scale    Website blog to 4 pods");
    sites
        .modify(&key("blog"), |site| site.spec.replicas = 4)
        .await?;
    settled(client, "blog", 4).await?;
    let refused = refuse(&sites).await?;
    println!("delete   Website shop");
    sites.delete(&key("shop")).await?;
    install::poll("shop to be cleaned up and gone", || async {
        let gone = sites
            .get(&key("shop"))
            .await
            .is_ok_and(|site| site.is_none());
        (gone && !dns.has(&key("shop"))).then_some(())
    })
    .await?;
    Ok(refused)
}

/// Creates `broken` (50 pods): the webhook must refuse it.
async fn refuse(sites: &Writes<Website>) -> Result<String, BoxError> {
    println!("create   Website broken wants 50 pods");
    match sites.create(website("broken", 50)).await {
        Err(error) if error.is_forbidden() => {
            // The source is kube-rs's error: the API server's status.
            let status =
                std::error::Error::source(&error).and_then(|e| e.downcast_ref::<kube::Error>());
            let why = match status {
                Some(kube::Error::Api(status)) => status.message.clone(),
                _ => error.to_string(),
            };
            println!("refused  {why}");
            Ok(why)
        }
        Err(error) => Err(error.into()),
        Ok(_) => Err("the webhook let an invalid website in".into()),
    }
}

/// Waits until `name`'s status says `replicas` pods, `Ready`, for its
/// current generation.
async fn settled(client: &Client, name: &str, replicas: u32) -> Result<(), BoxError> {
    let sites: Api<Website> = Api::namespaced(client.clone(), NAMESPACE);
    install::poll(&format!("{name} to have {replicas} pods"), || async {
        let site = sites.get(name).await.ok()?;
        let status = site.status.as_ref()?;
        let current = status.observed_generation == site.metadata.generation;
        (current && status.replicas == replicas && status.is_ready()).then_some(())
    })
    .await?;
    println!("ready    Website {name} has {replicas} pods");
    Ok(())
}

/// What the API server holds at the end.
struct Live {
    blog_pods: usize,
    blog_ready: bool,
    shop_pods: usize,
    shop_gone: bool,
    shop_record: bool,
}

impl Live {
    async fn read(client: &Client, dns: &Dns) -> Result<Self, BoxError> {
        let pods = KubeSource::<Pod>::namespaced(client.clone(), NAMESPACE)
            .list()
            .await?
            .objects;
        let of = |site: &str| {
            let site = key(site);
            pods.iter()
                .filter(|p| p.deletion().is_none() && owner_of(p) == Some(site.clone()))
                .count()
        };
        let sites: Api<Website> = Api::namespaced(client.clone(), NAMESPACE);
        let blog = sites.get("blog").await?;
        Ok(Self {
            blog_pods: of("blog"),
            blog_ready: blog.status.is_some_and(|s| s.replicas == 4 && s.is_ready()),
            shop_pods: of("shop"),
            shop_gone: sites.get_opt("shop").await?.is_none(),
            shop_record: dns.has(&key("shop")),
        })
    }

    fn line(&self) -> String {
        let ok = self.blog_pods == 4
            && self.blog_ready
            && self.shop_gone
            && self.shop_pods == 0
            && !self.shop_record;
        format!(
            "final (read from the API server): blog has {} of 4 pods, {}; shop {} ({} pods, {}); invalid spec refused: {}",
            self.blog_pods,
            if self.blog_ready {
                "Ready"
            } else {
                "not Ready"
            },
            if self.shop_gone {
                "deleted after its cleanup"
            } else {
                "still there"
            },
            self.shop_pods,
            if self.shop_record {
                "its DNS record left"
            } else {
                "no DNS record"
            },
            verdict(ok, "converged"),
        )
    }
}

/// The Events the operator published in the namespace.
async fn count_events(client: &Client) -> Result<usize, BoxError> {
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    let ours = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("tend.example.com/website-operator"))
        .count();
    Ok(ours)
}

fn website(name: &str, replicas: u32) -> Website {
    let mut site = Website::new(
        name,
        WebsiteSpec {
            replicas,
            image: "nginx:1.27".to_owned(),
        },
    );
    site.metadata.namespace = Some(NAMESPACE.to_owned());
    site
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(NAMESPACE, name)
}
