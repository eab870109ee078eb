//! GitOps: the desired state is a directory of JSON files, one app per
//! file (a checkout of a repository; here a temporary directory the
//! example writes itself); the "cluster" is a memory store. The controller
//! makes the cluster match the directory: it follows files added, edited
//! and deleted while it runs, prunes apps that have no file, undoes manual
//! edits made in the cluster, and keeps an app at its last good state while
//! its file is malformed.
//!
//! tend features: the directory backend (feature `dir`: `DirSource`,
//! watched with OS file notifications, malformed files rejected and
//! counted), `owns` (a change in the cluster wakes the app, so drift is
//! seen at once), absence as a state to reconcile (no file: prune), and
//! `Client::create_or_update` under a `Manager`.
//!
//! ```sh
//! cargo run --example gitops --features dir                  # ~6 s
//! cargo run --example gitops --features dir -- --duration 60
//! cargo run --example gitops --features dir -- --forever
//! ```

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tend::client::{ClientError, Effect};
use tend::controller::{Action, Context, Reconciler};
use tend::dir::{DirSource, DirStatsHandle};
use tend::manager::Manager;
use tend::memory::MemoryStore;
use tend::{BoxError, Informer, Revision};

use support::{Clock, Summary, verdict};

/// The desired state of an app: one JSON file in the directory.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct App {
    name: String,
    image: String,
    replicas: u32,
    #[serde(skip)]
    version: Revision,
}

/// An app as it runs in the cluster.
#[derive(Debug, Clone, PartialEq)]
struct Deployed {
    name: String,
    image: String,
    replicas: u32,
    version: Revision,
}

tend::impl_object!(App, key: name: String, version: version);
tend::impl_object!(Deployed, key: name: String, version: version);

/// Observe the file and the cluster, compare, act on the cluster.
struct Sync {
    clock: Clock,
    stats: Arc<Mutex<Stats>>,
}

impl Reconciler<App> for Sync {
    type Error = ClientError;

    async fn reconcile(&self, ctx: Context<App>) -> Result<Action, ClientError> {
        let running = ctx.cache::<Deployed>().and_then(|s| s.get(ctx.key()));
        let observed = format!(
            "file {} | cluster {}",
            ctx.object()
                .map_or("none".into(), |a| spec(&a.image, a.replicas)),
            running
                .as_ref()
                .map_or("none".into(), |d| spec(&d.image, d.replicas)),
        );
        let cluster = ctx.client::<Deployed>().expect("writes the cluster");
        let (compare, act) = match (ctx.object(), &running) {
            (None, None) => return Ok(Action::Done),
            (None, Some(_)) => {
                // Pruned: the directory no longer (or never) had it.
                match cluster.delete(ctx.key()).await {
                    Ok(_) => ("not in the directory", "delete".to_owned()),
                    Err(ClientError::NotFound { .. }) => return Ok(Action::Done),
                    Err(error) => return Err(error),
                }
            }
            (Some(app), running) => {
                if running
                    .as_ref()
                    .is_some_and(|d| d.image == app.image && d.replicas == app.replicas)
                {
                    return Ok(Action::Done);
                }
                let deployed = Deployed {
                    name: app.name.clone(),
                    image: app.image.clone(),
                    replicas: app.replicas,
                    version: Revision::ZERO,
                };
                let written = cluster
                    .create_or_update(deployed, |d| {
                        d.image.clone_from(&app.image);
                        d.replicas = app.replicas;
                    })
                    .await?;
                match written.effect {
                    Effect::Unchanged => return Ok(Action::Done), // our write, not yet cached
                    Effect::Created => ("not in the cluster", "create".to_owned()),
                    _ => (
                        "the cluster differs",
                        format!("update to {}", spec(&app.image, app.replicas)),
                    ),
                }
            }
        };
        self.stats.lock().expect("not poisoned").writes += 1;
        println!(
            "{} reconcile {} ({}) | observe: {observed} | compare: {compare} | act: {act}",
            self.clock.stamp(),
            ctx.key(),
            ctx.triggers(),
        );
        Ok(Action::Done)
    }
}

fn spec(image: &str, replicas: u32) -> String {
    format!("{image} ×{replicas}")
}

#[derive(Debug, Default)]
struct Stats {
    writes: u32,
}

/// Writes `app.json` in `dir`, as a `git pull` would.
fn write_app(dir: &Path, name: &str, image: &str, replicas: u32) -> std::io::Result<()> {
    let json = format!(r#"{{"name": "{name}", "image": "{image}", "replicas": {replicas}}}"#);
    std::fs::write(dir.join(format!("{name}.json")), json)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let duration = support::run_for("gitops", 6.0);
    let clock = Clock::start();
    let stats = Arc::new(Mutex::new(Stats::default()));
    let repo = tempfile::tempdir()?;
    let dir = repo.path();
    write_app(dir, "web", "nginx:1.27", 3)?;
    write_app(dir, "api", "api:2.0", 2)?;
    write_app(dir, "worker", "worker:0.9", 1)?;
    let cluster = MemoryStore::<Deployed>::new("cluster");
    // Left over from an earlier deploy: no file describes it.
    cluster.put(Deployed {
        name: "legacy".into(),
        image: "legacy:0.1".into(),
        replicas: 1,
        version: Revision::ZERO,
    });
    println!(
        "declare: {} holds web.json, api.json, worker.json; the cluster runs legacy",
        dir.display()
    );

    let source = DirSource::<App>::json("apps", dir);
    let files = source.stats_handle();
    let mut manager = Manager::builder().build()?;
    let apps = manager.informer("apps", || Informer::builder(source).build())?;
    let deployed = manager.informer("cluster", || Informer::builder(cluster.clone()).build())?;
    let sync = Sync {
        clock,
        stats: Arc::clone(&stats),
    };
    let controller = manager
        .controller("gitops", &apps, sync)
        .owns(&deployed, |d: &Deployed| Some(d.name.clone()))
        .client(cluster.client())
        .build()?;
    manager.add_controller(controller)?;
    let stop = manager.shutdown_token();
    let running = tokio::spawn(manager.run());
    support::play(&stop, async {
        edit_the_world(dir, &cluster, &files, clock, duration).await?;
        clock.at(duration, 1.0).await;
        Ok::<_, BoxError>(())
    })
    .await?;
    running.await??;
    println!("{}", summarize(dir, &cluster, &files.stats(), &stats)?);
    Ok(())
}

/// What happens while the controller runs: commits pulled into the
/// directory, and hands in the cluster.
async fn edit_the_world(
    dir: &Path,
    cluster: &MemoryStore<Deployed>,
    files: &DirStatsHandle,
    clock: Clock,
    duration: Option<std::time::Duration>,
) -> Result<(), BoxError> {
    let say = |what: &str| println!("{} WORLD {what}", clock.stamp());
    clock.at(duration, 0.15).await;
    say("git pull: web.json now wants 5 replicas");
    write_app(dir, "web", "nginx:1.27", 5)?;
    clock.at(duration, 0.3).await;
    say("git pull: cache.json added");
    write_app(dir, "cache", "redis:7", 1)?;
    clock.at(duration, 0.45).await;
    say("kubectl edit: someone sets web's image to nginx:debug in the cluster");
    let web = cluster.get(&"web".to_owned()).ok_or("web is deployed")?;
    cluster.put(Deployed {
        image: "nginx:debug".into(),
        ..web
    });
    clock.at(duration, 0.55).await;
    say("git pull: worker.json deleted");
    std::fs::remove_file(dir.join("worker.json"))?;
    clock.at(duration, 0.65).await;
    say("kubectl create: someone starts rogue in the cluster");
    cluster.put(Deployed {
        name: "rogue".into(),
        image: "miner:latest".into(),
        replicas: 8,
        version: Revision::ZERO,
    });
    clock.at(duration, 0.75).await;
    say("git pull: api.json is cut short (malformed)");
    std::fs::write(
        dir.join("api.json"),
        r#"{"name": "api", "image": "api:2.1", "replicas": "#,
    )?;
    clock.at(duration, 0.82).await;
    say(&format!(
        "the source rejects it ({} malformed); api keeps its last good state",
        files.stats().malformed
    ));
    clock.at(duration, 0.88).await;
    say("git pull: api.json fixed, image api:2.1");
    write_app(dir, "api", "api:2.1", 2)?;
    Ok(())
}

fn summarize(
    dir: &Path,
    cluster: &MemoryStore<Deployed>,
    files: &tend::dir::DirStats,
    stats: &Mutex<Stats>,
) -> Result<Summary, BoxError> {
    let mut wanted = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let app: App = serde_json::from_slice(&std::fs::read(entry?.path())?)?;
        wanted.push((app.name, app.image, app.replicas));
    }
    let mut running: Vec<_> = cluster
        .snapshot()
        .objects
        .into_iter()
        .map(|d| (d.name, d.image, d.replicas))
        .collect();
    wanted.sort();
    running.sort();
    let names: Vec<&str> = running.iter().map(|(name, ..)| name.as_str()).collect();
    Ok(Summary::default()
        .line(format!(
            "directory: {} files, {} rejected contents (a malformed file keeps its app at its last good state)",
            files.files, files.decode_errors
        ))
        .line(format!(
            "controller: {} writes to the cluster (creates, updates, deletes)",
            stats.lock().expect("not poisoned").writes
        ))
        .line(format!(
            "final: the cluster runs {} ({}), the directory holds {}: {}",
            running.len(),
            names.join(" "),
            wanted.len(),
            verdict(wanted == running, "in sync")
        )))
}
